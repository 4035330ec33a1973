import FerryCore
import FerryPostgres
import Foundation

/// The answers of a batch in `ferry_changes`: read back for change ids seen before, stored for new ones.
extension ChangeMerger {
    /// Answers given before to the segment's change ids, by id. An id stored for another device or dataset is
    /// refused without revealing that answer.
    static func storedAnswers(_ segment: [PreparedChange], context: BatchContext, on pg: PostgresConnection) throws
        -> [String: ChangeResult]
    {
        try storedAnswers(
            from: try pg.runPrepared(storedAnswersSQL, storedAnswersParameters(segment, context: context)),
            context: context)
    }

    // The ids behind a sub-select, so the planner looks them up by the primary key (see keyFilter).
    static let storedAnswersSQL =
        "SELECT id, result::text, dataset = $2 AND client_id = $3 FROM ferry_changes WHERE id = ANY(ARRAY(SELECT unnest($1::text[])))"

    static func storedAnswersParameters(_ segment: [PreparedChange], context: BatchContext) -> [String?] {
        [ChangeLog.arrayLiteral(segment.map(\.change.id)), context.dataset, context.clientId]
    }

    /// The rows of ``storedAnswersSQL`` by change id.
    static func storedAnswers(from stored: [[String?]], context: BatchContext) throws -> [String: ChangeResult] {
        var storedByID: [String: ChangeResult] = [:]
        for row in stored {
            guard let id = row[0], let text = row[1] else { continue }
            storedByID[id] =
                row[2] == "t" ? try JSONDecoder().decode(ChangeResult.self, from: Data(text.utf8)) : idTaken(id)
        }
        return storedByID
    }

    /// Stores new answers in `ferry_changes` in the caller's transaction, and with `commit` commits it: one round
    /// trip (a pipeline of the INSERT and the COMMIT). The ids and answers go as two text arrays; a `COPY`, as
    /// before, cost two round trips and the COMMIT a third.
    static func storeAnswers(_ answers: [ChangeResult], context: BatchContext, commit: Bool, on pg: PostgresConnection)
        throws
    {
        var statements: [PostgresConnection.PipelinedStatement] = []
        if !answers.isEmpty {
            var json: [UInt8] = []
            json.reserveCapacity(answers.count * 320)
            for (k, answer) in answers.enumerated() {
                if k > 0 { json.append(0x1E) }
                AnswerJSON.write(answer, to: &json)
            }
            statements.append(
                .init(
                    context.storeAnswersSQL,
                    [
                        ChangeLog.arrayLiteral(answers.map(\.id)), context.dataset, context.clientId, context.nowText,
                        String(decoding: json, as: UTF8.self),
                    ]))
        }
        if commit { statements.append(.init("COMMIT")) }
        guard !statements.isEmpty else { return }
        _ = try pg.runPipeline(statements)
    }
}
