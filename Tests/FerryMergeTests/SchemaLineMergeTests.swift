import FerryCore
import FerryPostgres
import FerryTestSupport
import Foundation
import Logging
import Testing

@testable import FerryMerge

/// Two schema lines of one dataset over ONE PostgreSQL table, one merger per line: line 1 shows `name` as
/// `title`, lacks `rating` (excluded) and `note` (not in its query), and keeps `distance` as the integer it used to
/// be (a `query:` cast); line 2 shows every column. Edits of either line merge into the same rows.
@Suite struct SchemaLineMergeTests {
    static let base = "2026-11-21T09:00:00.000Z"

    static let ddl = """
        CREATE TABLE items(
          id text PRIMARY KEY,
          name text NOT NULL,
          distance numeric(6,1) NOT NULL DEFAULT 0,
          rating integer DEFAULT 3,
          note text,
          created_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL);
        """

    static func lineOne(_ rule: MergeRule) -> String {
        """
        dataset: items
        schemaVersion: 1
        tables:
          - name: items
            query: SELECT id, name, distance::int AS distance, rating, created_at, updated_at FROM items
            exclude: [rating]
            rename: { title: name }
            writable: true
            merge: \(rule.rawValue)
        """
    }

    static func lineTwo(_ rule: MergeRule) -> String {
        "dataset: items\nschemaVersion: 2\ntables:\n  - name: items\n    writable: true\n    merge: \(rule.rawValue)\n"
    }

    /// Line 3 renames the key and both timestamps.
    static let lineThree = """
        dataset: items
        schemaVersion: 3
        timestamps: { created: made, updated: modified }
        tables:
          - name: items
            rename: { ident: id, made: created_at, modified: updated_at }
            writable: true
        """

    struct Lines {
        let database: TestDatabase
        let pg: PostgresConnection
        let clock: TestClock
        let mergers: [ChangeMerger]

        init(_ rule: MergeRule = .newestWins) async throws {
            database = try TestDatabase.create("lines")
            pg = try database.connect()
            try pg.execute(SchemaLineMergeTests.ddl)
            let clock = TestClock("2026-11-21T10:00:00.000Z")
            self.clock = clock
            var mergers: [ChangeMerger] = []
            for (i, yaml) in [lineOne(rule), lineTwo(rule), lineThree].enumerated() {
                let template = try Template.parse(yaml: yaml, path: "items.v\(i + 1).yml")
                mergers.append(
                    try await ChangeMerger.start(
                        dataset: template.dataset,
                        tables: template.tables.map { MergeTable($0, timestamps: template.timestamps) },
                        configuration: .init(databaseURL: database.url, connections: 1, now: { clock.now }),
                        logger: Logger(label: "test")))
            }
            self.mergers = mergers
        }

        func close() {
            for merger in mergers { merger.shutdown() }
            database.drop()
        }

        func seed(_ id: String, name: String = "Alpha", distance: String = "12.4", rating: String? = "5") throws {
            _ = try pg.query(
                "INSERT INTO items VALUES ($1, $2, $3::numeric, $4::int, NULL, $5::timestamptz, $5::timestamptz)",
                [id, name, distance, rating, SchemaLineMergeTests.base])
        }

        /// The server's row: name, distance, rating, note ("NULL" for null).
        func row(_ id: String) throws -> [String]? {
            try pg.query("SELECT name, distance::text, rating::text, note FROM items WHERE id = $1", [id]).first?
                .map { $0 ?? "NULL" }
        }

        func push(
            line: Int, _ op: Change.Operation, _ id: String, _ values: [String: JSONValue] = [:],
            edited: String = "2026-11-21T09:30:00.000Z", base: String? = SchemaLineMergeTests.base
        ) async throws -> ChangeResult {
            let key = line == 3 ? "ident" : "id"
            let change = Change(
                id: UUID().uuidString, table: "items", op: op, key: [key: .string(id)], values: values,
                editedAt: edited, baseUpdatedAt: op == .insert ? nil : base)
            return try await mergers[line - 1].apply(
                ChangeBatch(clientId: "device-\(line)", sentAt: Timestamp.format(clock.now), changes: [change])
            ).results[0]
        }
    }

    @Test("an update from line 1 writes PostgreSQL's columns through the renames and never the columns it lacks")
    func updateFromOlderLine() async throws {
        let lines = try await Lines()
        defer { lines.close() }
        try lines.seed("a")
        try lines.pg.execute("UPDATE items SET note = 'kept' WHERE id = 'a'")

        // When line 1 renames the trip and sets its (integer) distance
        let result = try await lines.push(line: 1, .update, "a", ["title": .string("Alpine"), "distance": .int(20)])

        // Then name and distance are written; rating and note keep the server's values
        #expect(result.status == .applied)
        #expect(try lines.row("a") == ["Alpine", "20.0", "5", "kept"])
        // And the answer is the row in line 1's shape: SQLite names, the integer distance, no rating or note
        #expect(
            result.row == [
                "id": .string("a"), "title": .string("Alpine"), "distance": .int(20),
                "created_at": .string(Self.base), "updated_at": .string("2026-11-21T10:00:00.000Z"),
            ])
    }

    @Test("an insert from line 1 gets PostgreSQL's default for a column its line lacks, or NULL without one")
    func insertFromOlderLine() async throws {
        let lines = try await Lines()
        defer { lines.close() }
        let result = try await lines.push(line: 1, .insert, "n", ["title": .string("New"), "distance": .int(7)])
        #expect(result.status == .applied)
        #expect(try lines.row("n") == ["New", "7.0", "3", "NULL"])
        #expect(result.row?["title"] == .string("New") && result.row?["rating"] == nil && result.row?["name"] == nil)
    }

    @Test(
        "a change from line 1 naming a column its line lacks (or a PostgreSQL name it renames) is invalid",
        arguments: [
            ["rating": JSONValue.int(1)], ["note": .string("x")], ["name": .string("x")],
            ["distance": .double(12.5)],
        ])
    func columnOfAnotherLine(_ values: [String: JSONValue]) async throws {
        let lines = try await Lines()
        defer { lines.close() }
        try lines.seed("a")
        let result = try await lines.push(line: 1, .update, "a", values.merging(["title": .string("B")]) { a, _ in a })
        #expect(result.status == .invalid && result.row == nil)
        #expect(try lines.row("a") == ["Alpha", "12.4", "5", "NULL"])
        // The same column is line 2's to write
        if values["rating"] != nil {
            #expect(try await lines.push(line: 2, .update, "a", values).status == .applied)
            #expect(try lines.row("a")?[2] == "1")
        }
    }

    /// Line 2 edits first; line 1's older edit of the same row follows the table's rule, and line 1's answer is
    /// the server row in line 1's shape.
    @Test(arguments: MergeRule.allCases)
    func conflictBetweenLines(rule: MergeRule) async throws {
        let lines = try await Lines(rule)
        defer { lines.close() }
        try lines.seed("a")
        let two = try await lines.push(
            line: 2, .update, "a", ["rating": .int(4), "distance": .string("30.5")], edited: "2026-11-21T09:40:00.000Z")
        #expect(two.status == .applied && two.row?["rating"] == .int(4) && two.row?["name"] == .string("Alpha"))

        lines.clock.set("2026-11-21T10:05:00.000Z")
        let one = try await lines.push(
            line: 1, .update, "a", ["title": .string("Old edit")], edited: "2026-11-21T09:35:00.000Z")
        switch rule {
        case .newestWins, .serverWins:
            #expect(one.status == .rejected)
            #expect(
                one.row == [
                    "id": .string("a"), "title": .string("Alpha"), "distance": .int(31),
                    "created_at": .string(Self.base), "updated_at": .string("2026-11-21T10:00:00.000Z"),
                ])
            #expect(try lines.row("a") == ["Alpha", "30.5", "4", "NULL"])
        case .clientWins:
            #expect(one.status == .applied && one.row?["title"] == .string("Old edit"))
            // Line 1 never touches line 2's rating
            #expect(try lines.row("a") == ["Old edit", "30.5", "4", "NULL"])
        }
    }

    @Test("a renamed key and renamed timestamps: updates, deletes and tombstones shared by every line")
    func renamedKeyAndTimestamps() async throws {
        let lines = try await Lines()
        defer { lines.close() }
        try lines.seed("a")
        let update = try await lines.push(line: 3, .update, "a", ["name": .string("Three")], base: Self.base)
        #expect(update.status == .applied)
        #expect(update.row?["ident"] == .string("a") && update.row?["id"] == nil)
        #expect(
            update.row?["modified"] == .string("2026-11-21T10:00:00.000Z") && update.row?["made"] == .string(Self.base))
        #expect(update.row?["updated_at"] == nil)

        // A stale edit (older base) conflicts through the renamed updated column
        lines.clock.set("2026-11-21T10:05:00.000Z")
        let stale = try await lines.push(
            line: 3, .update, "a", ["name": .string("Stale")], edited: "2026-11-21T09:20:00.000Z", base: Self.base)
        #expect(stale.status == .rejected && stale.row?["name"] == .string("Three"))

        // A delete from line 3 leaves a tombstone that line 1's and line 2's inserts of the key find
        let delete = try await lines.push(
            line: 3, .delete, "a", edited: "2026-11-21T10:04:00.000Z", base: "2026-11-21T10:00:00.000Z")
        #expect(delete.status == .applied)
        #expect(try lines.row("a") == nil)
        let reinsert = try await lines.push(
            line: 1, .insert, "a", ["title": .string("Back"), "distance": .int(1)], edited: "2026-11-21T10:04:30.000Z")
        #expect(reinsert.status == .gone)
        #expect(try lines.row("a") == nil)
    }
    @Test("a scoped line with renames and :scope in its query: visibility is checked on PostgreSQL's names")
    func scopedLineWithRenames() async throws {
        let lines = try await Lines()
        defer { lines.close() }
        try lines.seed("high", rating: "5")
        try lines.seed("low", rating: "1")
        let template = try Template.parse(
            yaml: """
                dataset: items
                schemaVersion: 4
                scope: { values: [1, 5], token: "SELECT 1 WHERE $1 = ''" }
                tables:
                  - name: items
                    query: SELECT id, name, rating, created_at, updated_at FROM items WHERE rating <= :scope
                    rename: { ident: id, title: name }
                    writable: true
                """, path: "items.v4.yml")
        let clock = lines.clock
        let merger = try await ChangeMerger.start(
            dataset: template.dataset, tables: template.tables.map { MergeTable($0, timestamps: template.timestamps) },
            configuration: .init(databaseURL: lines.database.url, connections: 1, now: { clock.now }),
            logger: Logger(label: "test"), scopeTemplate: template)
        defer { merger.shutdown() }

        func push(_ id: String) async throws -> ChangeResult {
            let change = Change(
                id: UUID().uuidString, table: "items", op: .update, key: ["ident": .string(id)],
                values: ["title": .string("Scoped")], editedAt: "2026-11-21T09:30:00.000Z", baseUpdatedAt: Self.base)
            return try await merger.apply(
                ChangeBatch(clientId: "device-4", sentAt: Timestamp.format(clock.now), changes: [change]), scope: "1"
            ).results[0]
        }
        let high = try await push("high")
        #expect(high.status == .forbidden && high.row == nil)
        let low = try await push("low")
        #expect(low.status == .applied && low.row?["title"] == .string("Scoped") && low.row?["ident"] == .string("low"))
        #expect(try lines.row("high")?[0] == "Alpha" && lines.row("low")?[0] == "Scoped")
    }
}
