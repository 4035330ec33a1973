import FerryCore
import FerryStore
import Foundation
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

/// Templates checked against PostgreSQL (the parser alone is tested in FerryPostgresTests).
@Suite("Publisher templates")
struct TemplateTests {
    static let pgSchema = """
        CREATE TABLE items (id integer PRIMARY KEY, name text, updated_at timestamptz);
        CREATE TABLE keyless (code text, label text);
        CREATE TABLE plain (id integer PRIMARY KEY, name text);
        """

    /// Templates that parse but do not match the database: (YAML, key path, message fragment).
    static let pgCases: [(String, String, String)] = [
        (
            "dataset: d\ntables:\n  - name: t\n    source: nosuch\n", "tables[0].source",
            "PostgreSQL has no table 'nosuch'"
        ),
        (
            "dataset: d\ntables:\n  - name: items\n    query: SELECT id, nme FROM items\n", "tables[0].query",
            "column \"nme\" does not exist"
        ),
        (
            "dataset: d\ntables:\n  - name: items\n  - name: plain\n    primaryKey: [uid]\n", "tables[1].primaryKey[0]",
            "key column 'uid'"
        ),
        ("dataset: d\ntables:\n  - name: items\n    exclude: [secret]\n", "tables[0].exclude[0]", "no column 'secret'"),
        ("dataset: d\ntables:\n  - name: items\n    exclude: [id]\n", "tables[0].primaryKey", "is excluded"),
        ("dataset: d\ntables:\n  - name: keyless\n", "tables[0].primaryKey", "has no primary key"),
        ("dataset: d\ntables:\n  - name: plain\n    writable: true\n", "timestamps.updated", "no 'updated_at' column"),
        (
            "dataset: d\ntables:\n  - name: items\n    indexes: [CREATE INDEX i ON items(nope)]\n",
            "tables[0].indexes[0]", "index fails"
        ),
        (
            "dataset: d\nscope: {values: [1], token: \"SELECT 1 FROM items WHERE name = $1\"}\ntables:\n  - name: items\n    filter: \"nme <= :scope\"\n",
            "tables[0].filter", "column \"nme\" does not exist"
        ),
        (
            "dataset: d\nscope: {values: [1], token: \"SELECT 1 FROM items WHERE name = $1\"}\ntables:\n  - name: items\n  - name: plain\n    parent: {table: items, column: item_id}\n",
            "tables[1].parent.column", "no column 'item_id'"
        ),
        (
            "dataset: d\nscope: {values: \"SELECT id, name FROM items\", token: \"SELECT 1 FROM items WHERE name = $1\"}\ntables: [{name: items}]\n",
            "scope.values", "returns 2 columns"
        ),
        (
            "dataset: d\nscope: {values: [1], token: \"SELECT id FROM itemz WHERE name = $1\"}\ntables: [{name: items}]\n",
            "scope.token", "relation \"itemz\" does not exist"
        ),
    ]

    @Test(
        "templates that do not match PostgreSQL name file, table and key; nothing is published",
        arguments: 0..<pgCases.count)
    func badAgainstDatabase(_ index: Int) throws {
        let (yaml, key, fragment) = Self.pgCases[index]
        let fixture = try PublisherFixture("tplpg", sql: Self.pgSchema)
        defer { fixture.cleanUp() }
        let path = try fixture.writeTemplate(yaml)

        let error = try #require(ferryError { _ = try fixture.publish(template: path) })
        #expect(error.code == .badTemplate)
        #expect(error.path == path)
        #expect(error.key == key)
        #expect(error.description.contains(fragment), "\(error.description)")
        #expect(try fixture.storeAccess.manifest(for: "d") == nil)
        let tmp = fixture.storeAccess.temporaryDirectory(dataset: "d").path
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: tmp)) ?? []).isEmpty)
    }

    @Test("a template's primary keys resolve from PostgreSQL for the merger")
    func resolvePrimaryKeys() throws {
        let fixture = try PublisherFixture(
            "tplpk",
            sql:
                "CREATE TABLE pairs (a text, b integer, v text, PRIMARY KEY (b, a)); CREATE SCHEMA s; CREATE TABLE s.x (id integer PRIMARY KEY);"
        )
        defer { fixture.cleanUp() }
        let template = try Template.parse(
            yaml: "dataset: d\ntables: [{name: pairs}, {name: x, source: s.x}]\n", path: "t.yml")
        let resolved = try template.resolvingPrimaryKeys(using: fixture.database.connect())
        #expect(resolved.tables.map(\.primaryKey) == [["b", "a"], ["id"]])
    }

    @Test("a schema file replaces the derived DDL")
    func schemaFile() throws {
        let fixture = try PublisherFixture(
            "tplschema",
            sql: "CREATE TABLE plain (id integer PRIMARY KEY, name text); INSERT INTO plain VALUES (1, 'a'), (2, 'b');")
        defer { fixture.cleanUp() }
        try "CREATE TABLE plain (id INTEGER PRIMARY KEY, name TEXT NOT NULL COLLATE NOCASE) WITHOUT ROWID;"
            .write(to: fixture.directory.appending("plain.sqlite.sql"), atomically: true, encoding: .utf8)
        let path = try fixture.writeTemplate("dataset: d\nschema: plain.sqlite.sql\ntables: [{name: plain}]\n")
        _ = try fixture.publish(template: path)
        let db = try fixture.open(dataset: "d", version: 1)
        let sql = try db.scalar("SELECT sql FROM sqlite_master WHERE name = 'plain'")?.text ?? ""
        #expect(sql.contains("WITHOUT ROWID"))
        #expect(try db.scalar("SELECT count(*) FROM plain WHERE name = 'A'") == .integer(1))

        // A schema file that lacks a column names the schema key.
        try "CREATE TABLE plain (id INTEGER PRIMARY KEY);".write(
            to: fixture.directory.appending("plain.sqlite.sql"), atomically: true, encoding: .utf8)
        try fixture.execute("UPDATE plain SET name = 'c' WHERE id = 1")
        let error = try #require(ferryError { _ = try fixture.publish(template: path) })
        #expect(error.code == .badTemplate && error.key == "schema" && error.path == path)
    }
}
