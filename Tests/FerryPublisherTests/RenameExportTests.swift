import FerryCore
import FerryStore
import Foundation
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

/// `rename:` on export: two templates (two schema lines) show one PostgreSQL table differently.
@Suite("Rename on export")
struct RenameExportTests {
    static let schema = """
        CREATE TABLE items (
          id text PRIMARY KEY,
          name text NOT NULL,
          distance numeric(6,1) NOT NULL DEFAULT 0,
          rating integer DEFAULT 3,
          created_at timestamptz NOT NULL DEFAULT '2026-01-01T00:00:00Z',
          updated_at timestamptz NOT NULL DEFAULT '2026-01-01T00:00:00Z');
        INSERT INTO items (id, name, distance, rating) VALUES ('a', 'Alpha', 12.4, 5), ('b', 'Beta', 7.6, NULL);
        CREATE TABLE codes (code integer PRIMARY KEY, label text);
        INSERT INTO codes VALUES (2, 'two'), (1, 'one');
        """

    /// Line 1: `name` shown as `title`, no `rating`, `distance` as the integer it used to be (a `query:` cast).
    static let lineOne = """
        dataset: lineone
        tables:
          - name: items
            query: SELECT id, name, distance::int AS distance, rating, created_at, updated_at FROM items
            exclude: [rating]
            rename: { title: name }
            writable: true
        """

    static func columns(_ db: SQLiteConnection, _ table: String) throws -> [String] {
        try db.query("SELECT name || ' ' || type FROM pragma_table_info('\(table)') ORDER BY cid").map {
            $0[0].text ?? ""
        }
    }

    @Test("the snapshot has the renamed column, with and without query:, and a publish after a change carries it")
    func renamedColumn() throws {
        let fixture = try PublisherFixture("rename", sql: Self.schema)
        defer { fixture.cleanUp() }
        let one = try fixture.writeTemplate(Self.lineOne, name: "one.yml")
        let two = try fixture.writeTemplate(
            """
            dataset: linetwo
            tables:
              - name: items
                rename: { label: name }
              - name: codes
                rename: { number: code, code: label }
            """, name: "two.yml")
        _ = try IncrementalPublishTests.publish(fixture, one)
        _ = try IncrementalPublishTests.publish(fixture, two)

        // Then line 1 has title and an integer distance, no rating
        let db1 = try fixture.open(dataset: "lineone", version: 1)
        #expect(
            try Self.columns(db1, "items") == [
                "id TEXT", "title TEXT", "distance INTEGER", "created_at TEXT", "updated_at TEXT",
            ])
        #expect(
            try db1.query("SELECT id, title, distance FROM items ORDER BY id") == [
                [.text("a"), .text("Alpha"), .integer(12)], [.text("b"), .text("Beta"), .integer(8)],
            ])
        // And line 2 has every column, `name` as `label`; a renamed key (and a swap of names) keeps its order
        let db2 = try fixture.open(dataset: "linetwo", version: 1)
        #expect(
            try Self.columns(db2, "items") == [
                "id TEXT", "label TEXT", "distance TEXT", "rating INTEGER", "created_at TEXT", "updated_at TEXT",
            ])
        #expect(
            try db2.query("SELECT number, code FROM codes") == [
                [.integer(1), .text("one")], [.integer(2), .text("two")],
            ])
        let ddl = try db2.scalar("SELECT sql FROM sqlite_master WHERE name = 'codes'")?.text ?? ""
        #expect(ddl.contains("PRIMARY KEY (\"number\")"), "\(ddl)")
        #expect(
            try db2.query("SELECT primaryKey, columns FROM ferry_tables WHERE name = 'codes'") == [
                [.text("[\"number\"]"), .text("[\"number\",\"code\"]")]
            ])

        // When a row changes, the next version (built from the row index) carries it under the SQLite name
        try fixture.execute("UPDATE items SET name = 'Alpine', distance = 20 WHERE id = 'a'")
        let v2 = try IncrementalPublishTests.publish(fixture, one)
        #expect(v2.version == 2 && v2.incremental != nil)
        let db1v2 = try fixture.open(dataset: "lineone", version: 2)
        #expect(
            try db1v2.query("SELECT title, distance FROM items WHERE id = 'a'") == [[.text("Alpine"), .integer(20)]])
    }

    /// Templates whose rename does not match the columns: (YAML, key path, message fragment).
    static let badCases: [(String, String, String)] = [
        (
            "dataset: d\ntables:\n  - name: items\n    rename: {title: nme}\n", "tables[0].rename.title",
            "no PostgreSQL column 'nme' to show as 'title'"
        ),
        (
            "dataset: d\ntables:\n  - name: items\n    rename: {rating: name}\n", "tables[0].rename.rating",
            "clashes with the exported column 'rating'"
        ),
        (
            "dataset: d\ntables:\n  - name: items\n    query: SELECT id, name FROM items\n    rename: {title: rating}\n",
            "tables[0].rename.title", "no PostgreSQL column 'rating'"
        ),
        // A key the export would lose: excluded, missing from the query, renamed away.
        (
            "dataset: d\ntables:\n  - name: items\n    query: SELECT name, rating FROM items\n", "tables[0].primaryKey",
            "key column 'id' is not among the exported columns"
        ),
        (
            "dataset: d\ntables:\n  - name: items\n    primaryKey: [id]\n    query: SELECT name AS id2, rating FROM items\n",
            "tables[0].primaryKey[0]", "key column 'id' is not among the exported columns"
        ),
        ("dataset: d\ntables:\n  - name: items\n    exclude: [id]\n", "tables[0].primaryKey", "is excluded"),
    ]

    @Test("a rename or key that does not match PostgreSQL names file, table and key", arguments: 0..<badCases.count)
    func badRename(_ index: Int) throws {
        let (yaml, key, fragment) = Self.badCases[index]
        let fixture = try PublisherFixture("renamebad", sql: Self.schema)
        defer { fixture.cleanUp() }
        let path = try fixture.writeTemplate(yaml)
        let error = try #require(ferryError { _ = try fixture.publish(template: path) })
        #expect(error.code == .badTemplate && error.path == path && error.key == key)
        #expect(error.description.contains("'items'") && error.description.contains(fragment), "\(error.description)")
        #expect(try fixture.storeAccess.manifest(for: "d") == nil)
    }

    @Test("resolved primary keys are SQLite names")
    func resolvedKeyIsRenamed() throws {
        let fixture = try PublisherFixture("renamepk", sql: Self.schema)
        defer { fixture.cleanUp() }
        let template = try Template.parse(
            yaml: "dataset: d\ntables: [{name: codes, rename: {number: code}}]\n", path: "t.yml")
        let resolved = try template.resolvingPrimaryKeys(using: fixture.database.connect())
        #expect(resolved.tables[0].primaryKey == ["number"])
    }
}
