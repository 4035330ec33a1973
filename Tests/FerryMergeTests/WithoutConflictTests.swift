import FerryCore
import FerryPostgres
import FerryTestSupport
import Foundation
import Logging
import Testing

@testable import FerryMerge

/// The updates written without a read first (``ChangeMerger/updatesWithoutConflict(_:schema:context:on:)``) are
/// exactly those the rule, decided in Swift on the locked rows, writes whole: for every rule and column merge, on
/// rows and changes that meet and miss each part of the condition.
@Suite struct WithoutConflictTests {
    static let base = "2026-11-21T09:00:00.000Z"
    static let baseMillis: Int64 = 1_795_251_600_000

    /// `updated_at` may be NULL here, and may carry microseconds.
    static let ddl = """
        CREATE TABLE trips(
          id int PRIMARY KEY, name text, seats int NOT NULL, stops int NOT NULL,
          created_at timestamptz NOT NULL, updated_at timestamptz);
        """

    static let configurations: [(MergeRule, ColumnMerge)] = MergeRule.allCases.flatMap { rule in
        [
            ColumnMerge(), ColumnMerge(perColumn: true), ColumnMerge(perColumn: true, additive: ["stops"]),
            ColumnMerge(additive: ["stops"]),
        ].map { (rule, $0) }
    }

    @Test(arguments: 0..<12)
    func theConditionWritesWhatTheRuleWritesWhole(configuration: Int) async throws {
        let (rule, columns) = Self.configurations[configuration]
        var trips = MergeTable(name: "trips", source: "trips", writable: true, merge: rule)
        trips.columnMerge = columns
        let f = try await MergeFixture.make(ddl: Self.ddl, tables: [trips], clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        var generator = SeededGenerator(seed: UInt64(configuration + 1))
        // Rows last written at the base, 1 ms later, 0.4 ms later (the same millisecond), or never stamped.
        let stamps = ["'\(Self.base)'", "'2026-11-21T09:00:00.001Z'", "'2026-11-21T09:00:00.0004Z'", "NULL"]
        let rows = 160
        for id in 1...rows {
            _ = try f.pg.query(
                "INSERT INTO trips VALUES ($1::int, $2, $3::int, 0, '\(Self.base)', \(stamps[Int.random(in: 0..<4, using: &generator)]))",
                [
                    String(id), Bool.random(using: &generator) ? "Växjö" : nil,
                    String(Int.random(in: 0...1, using: &generator)),
                ])
        }
        let changes = (1...rows).map { id in Self.randomChange(row: id, using: &generator) }
        let sent = Self.baseMillis + 3_600_000
        let prepared = changes.compactMap {
            f.merger.prepare($0, sentMillis: sent, nowMillis: sent).validChange
        }
        #expect(prepared.count == rows)
        let schema = prepared[0].schema
        let context = BatchContext(
            dataset: "trips", clientId: "d", nowMillis: sent, nowText: Timestamp.format(unixMillis: sent), scope: nil,
            visibility: [:], storeAnswersSQL: "")

        try f.pg.execute("BEGIN")
        let decided = try ChangeMerger.decide(prepared, schema: schema, context: context, on: f.pg)
        try f.pg.execute("ROLLBACK")
        try f.pg.execute("BEGIN")
        let written = try ChangeMerger.updatesWithoutConflict(prepared, schema: schema, context: context, on: f.pg)
        try f.pg.execute("ROLLBACK")

        let whole = Set(decided.decisions.indices.filter { decided.decisions[$0] == .update })
        #expect(Set(written.keys) == whole, "\(rule) \(columns)")
        // Each kind of answer occurs, so the comparison covers both sides of the condition.
        #expect(whole.count > 10 && whole.count < rows - 10, "\(rule) \(columns): \(whole.count) of \(rows)")
    }

    /// Two batches updating the same rows in opposite orders, at once, ten times: the updates written first lock
    /// their rows in key order, so the batches wait for each other and PostgreSQL never finds a deadlock.
    @Test func batchesWritingTheSameRowsInOppositeOrdersDoNotDeadlock() async throws {
        let f = try await MergeFixture.make(rule: .clientWins, clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        for id in 1...200 { try f.seed(id: id, created: Self.base, updated: Self.base) }
        let merger = f.merger
        for round in 0..<10 {
            let batches = ["ascending", "descending"].map { device in
                let ids = device == "ascending" ? Array(1...200) : Array((1...200).reversed())
                return ChangeBatch(
                    clientId: device, sentAt: "2026-11-21T10:00:00.000Z",
                    changes: ids.map {
                        change(
                            .update, id: $0, values: ["seats": .int(Int64(round))], edited: "2026-11-21T09:59:00.000Z")
                    })
            }
            try await withThrowingTaskGroup(of: [ChangeResult].self) { group in
                for batch in batches { group.addTask { try await merger.apply(batch).results } }
                for try await answers in group { #expect(answers.allSatisfy { $0.status == .applied }) }
            }
        }
        // A backend writes its statistics when it ends: close the merger's connections and wait for them.
        merger.shutdown()
        let others =
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        for _ in 0..<100 where try f.count(others) > 0 { try await Task.sleep(for: .milliseconds(50)) }
        #expect(try f.count(others) == 0)
        #expect(try f.count("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()") == 0)
    }

    /// An update of row `row`: some of name, seats and stops, each with or without a base equal or not to the
    /// row's value, based on the row as last written at the base or 1 ms later (or with no base time), edited
    /// before or after those.
    static func randomChange(row: Int, using generator: inout SeededGenerator) -> Change {
        var values: [String: JSONValue] = [:]
        var bases: [String: JSONValue] = [:]
        for (column, current, other) in [
            ("name", JSONValue.string("Växjö"), JSONValue.null), ("seats", .int(0), .int(1)),
            ("stops", .int(0), .int(1)),
        ] where Bool.random(using: &generator) || (column == "seats" && values.isEmpty) {
            values[column] =
                column == "name" ? .string("Kalmar \(row)") : .int(Int64.random(in: 2...9, using: &generator))
            switch Int.random(in: 0..<3, using: &generator) {
            case 0: break
            case 1: bases[column] = current
            default: bases[column] = other
            }
        }
        let baseTimes = [base, "2026-11-21T09:00:00.001Z", nil]
        let edited = ["2026-11-21T08:59:00.000Z", "2026-11-21T09:00:00.001Z", "2026-11-21T09:30:00.000Z"]
        var made = change(
            .update, id: row, values: values, edited: edited[Int.random(in: 0..<3, using: &generator)],
            base: baseTimes[Int.random(in: 0..<3, using: &generator)])
        if Bool.random(using: &generator) { made.base = bases }
        return made
    }
}
