import FerryCore
import FerryTestSupport
import Foundation
import Testing

@testable import FerryPostgres

/// Schema lines in the template: `rename:`, keys a snapshot must keep, and a set of line templates checked together.
@Suite("Template lines")
struct TemplateLinesTests {
    @Test("rename: maps SQLite names to PostgreSQL columns, both ways")
    func rename() throws {
        let template = try Template.parse(
            yaml: "dataset: d\ntables:\n  - name: t\n    rename: { title: name, ident: id }\n    primaryKey: [ident]\n",
            path: "x.yml")
        let table = template.tables[0]
        #expect(table.rename == ["title": "name", "ident": "id"])
        #expect(table.sourceColumn(of: "title") == "name" && table.sourceColumn(of: "other") == "other")
        #expect(table.sqliteColumn(of: "id") == "ident" && table.sqliteColumn(of: "other") == "other")
        // A swap is two renames
        let swap = try Template.parse(yaml: "dataset: d\ntables: [{name: t, rename: {a: b, b: a}}]\n", path: "x.yml")
        #expect(swap.tables[0].sourceColumn(of: "a") == "b" && swap.tables[0].sqliteColumn(of: "a") == "b")
    }

    @Test("a child's parent link uses the PostgreSQL name of a renamed parent key")
    func parentKeyRenamed() throws {
        let template = try Template.parse(
            yaml: """
                dataset: d
                tables:
                  - name: camps
                    primaryKey: [camp]
                    rename: { camp: id }
                    filter: "tier <= 1"
                  - name: reviews
                    primaryKey: [id]
                    parent: { table: camps, column: camp_id }
                """, path: "x.yml")
        let sql = template.rowsSQL(tableAt: 1, scopeExpression: nil)
        #expect(sql.contains("IN (SELECT ferry_p0.\"id\" FROM (SELECT * FROM \"camps\" AS ferry_t1"), "\(sql)")
    }

    /// (YAML, the key path the error must name, a fragment of the message)
    static let badCases: [(String, String, String)] = [
        ("dataset: d\ntables:\n  - name: t\n    rename: [title]\n", "tables[0].rename", "must be a mapping"),
        ("dataset: d\ntables:\n  - name: t\n    renames: {a: b}\n", "tables[0].renames", "did you mean `rename`"),
        (
            "dataset: d\ntables:\n  - name: t\n    rename: {a: name, b: name}\n", "tables[0].rename.b",
            "'name' is already shown as 'a'"
        ),
        ("dataset: d\ntables:\n  - name: t\n    rename: {a: null}\n", "tables[0].rename.a", "not null"),
        (
            "dataset: d\ntables:\n  - name: t\n    exclude: [name]\n    rename: {title: name}\n",
            "tables[0].rename.title",
            "'name' is excluded"
        ),
        // A key column the snapshot would lose (the query's output is checked by the publisher).
        (
            "dataset: d\ntables:\n  - name: t\n    primaryKey: [id]\n    exclude: [id]\n", "tables[0].primaryKey[0]",
            "key column 'id' is excluded"
        ),
        (
            "dataset: d\ntables:\n  - name: t\n    primaryKey: [code, id]\n    rename: {ident: id}\n",
            "tables[0].primaryKey[1]", "key column 'id' is renamed to 'ident'"
        ),
        (
            "dataset: d\ntables:\n  - name: t\n    primaryKey: [ident]\n    rename: {ident: id}\n    exclude: [id]\n",
            "tables[0].rename.ident", "'id' is excluded"
        ),
    ]

    @Test("each bad rename or lost key names the file, the key path and the fix", arguments: 0..<badCases.count)
    func badTemplate(_ index: Int) throws {
        let (yaml, key, fragment) = Self.badCases[index]
        let error = try #require(ferryError { _ = try Template.parse(yaml: yaml, path: "bad.yml") })
        #expect(error.code == .badTemplate && error.path == "bad.yml" && error.key == key)
        #expect(error.description.contains(fragment), "\(error.description)")
    }

    static func line(_ version: Int, dataset: String = "trips", scope: String = "", path: String? = nil) throws -> (
        template: Template, path: String
    ) {
        let path = path ?? "trips.v\(version).yml"
        let yaml = "dataset: \(dataset)\nschemaVersion: \(version)\n\(scope)tables: [{name: trips}]\n"
        return (try Template.parse(yaml: yaml, path: path), path)
    }

    static let scope = "scope: {values: [0, 1], token: \"SELECT tier FROM users WHERE sha = $1\"}\n"

    @Test("lines of one dataset: same dataset, distinct schema versions, the same scope")
    func validLines() throws {
        try Template.validateLines([])
        try Template.validateLines([try Self.line(1)])
        try Template.validateLines([try Self.line(1), try Self.line(3), try Self.line(2)])
        try Template.validateLines([try Self.line(1, scope: Self.scope), try Self.line(2, scope: Self.scope)])
    }

    /// (lines, the file the error names, the key, a fragment of the message)
    static func badLines() throws -> [([(template: Template, path: String)], String, String, String)] {
        [
            (
                [try line(1), try line(2, dataset: "tours")], "trips.v2.yml", "dataset",
                "differs from 'trips' of trips.v1.yml"
            ),
            (
                [try line(1), try line(2), try line(2, path: "other.yml")], "other.yml", "schemaVersion",
                "also the schemaVersion of trips.v2.yml"
            ),
            ([try line(1, scope: scope), try line(2)], "trips.v2.yml", "scope", "one has `scope:` and the other not"),
            (
                [
                    try line(1, scope: scope),
                    try line(2, scope: "scope: {values: [0], token: \"SELECT tier FROM users WHERE sha = $1\"}\n"),
                ],
                "trips.v2.yml", "scope", "`scope.values` differ"
            ),
            (
                [
                    try line(1, scope: scope),
                    try line(2, scope: "scope: {values: [0, 1], token: \"SELECT tier FROM u WHERE sha = $1\"}\n"),
                ],
                "trips.v2.yml", "scope", "`scope.token` queries differ"
            ),
        ]
    }

    @Test("lines that do not fit together are refused naming both files")
    func badLineSets() throws {
        for (lines, path, key, fragment) in try Self.badLines() {
            let error = try #require(ferryError { try Template.validateLines(lines) })
            #expect(error.code == .badTemplate && error.path == path && error.key == key, "\(error)")
            #expect(error.description.contains(fragment), "\(error.description)")
        }
    }
}
