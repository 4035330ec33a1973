import FerryCore
import FerryPostgres
import Foundation

/// The slow path of a batch: each change in a transaction of its own, after the batch's transaction failed (a value a
/// constraint rejects, a concurrent insert of the same key, a deadlock), so that one bad change never stops the
/// others.
extension ChangeMerger {
    /// A write that would leave a row outside the caller's scope: the transaction is rolled back and the change
    /// answered `forbidden`.
    struct ScopeViolation: Error {}

    static let forbiddenMessage =
        "the row is not in your access scope (before or after this change); nothing was written"

    /// One change in its own transaction, retried on transient conflicts; a refusal becomes `invalid`.
    static func mergeAlone(_ change: PreparedChange, context: BatchContext, on pg: PostgresConnection) throws
        -> ChangeResult
    {
        var lastError = ""
        var forbidden = false
        for attempt in 1...3 {
            do {
                let stored = try begin(context, first: [change], lookingUp: true, on: pg).stored
                let result = try mergeSegment([change], context: context, stored: stored, commit: true, on: pg)[0]
                return result
            } catch is ScopeViolation {
                rollback(pg)
                forbidden = true
                break
            } catch let error as MergeInvariantError {
                rollback(pg)
                throw error
            } catch let error as PostgresQueryError {
                rollback(pg)
                guard pg.isConnected else {
                    throw FerryError(.database, "lost the PostgreSQL connection: \(error.message)")
                }
                lastError = error.message
                if error.isTransient && attempt < 3 { continue }
                break
            } catch {
                rollback(pg)
                guard pg.isConnected else { throw error }
                lastError = "\(error)"
                break
            }
        }
        let result =
            forbidden
            ? ChangeResult(id: change.change.id, status: .forbidden, row: nil, message: forbiddenMessage)
            : ChangeResult(
                id: change.change.id, status: .invalid, row: nil,
                message: "PostgreSQL refused the change to \(change.change.table): \(lastError)")
        // Store the refusal; if another request stored an answer for this id meanwhile, that answer wins.
        let stored = try pg.runPrepared(
            """
            WITH ins AS (INSERT INTO ferry_changes(id, dataset, client_id, result, processed_at)
                         VALUES ($1, $2, $3, $4::jsonb, $5::timestamptz) ON CONFLICT (id) DO NOTHING RETURNING result)
            SELECT result::text FROM ins
            UNION ALL SELECT result::text FROM ferry_changes WHERE id = $1 AND dataset = $2 AND client_id = $3
            """,
            [change.change.id, context.dataset, context.clientId, encode(result), context.nowText])
        if let text = stored.first?.first ?? nil {
            do {
                return try JSONDecoder().decode(ChangeResult.self, from: Data(text.utf8))
            } catch {
                throw FerryError(
                    .database,
                    "the stored answer of change \(change.change.id) in ferry_changes cannot be read: \(error)")
            }
        }
        // Neither stored nor ours: another device or dataset holds this id.
        return idTaken(change.change.id)
    }

    /// The answer to a change whose id another device or dataset already used: refused, and nothing of the other
    /// answer is revealed. Not stored (the id is taken).
    static func idTaken(_ id: String) -> ChangeResult {
        ChangeResult(
            id: id, status: .invalid, row: nil,
            message: "this change id was already used by another device or dataset; give each change a new UUID")
    }

    /// Ends a failed transaction. A ROLLBACK that fails means the connection is gone: every caller checks
    /// `pg.isConnected` next and reports that, which says more than the ROLLBACK's own error.
    static func rollback(_ pg: PostgresConnection) {
        // Harmless to ignore: the caller checks pg.isConnected and reports a lost connection.
        _ = try? pg.execute("ROLLBACK")
    }
}
