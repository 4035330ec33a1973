import FerryCore
import FerryTestSupport
import Foundation
import Testing

@testable import FerryPostgres

/// The template parser: the shipped templates, defaults, and every bad template naming its file, key and fix.
@Suite("Templates")
struct TemplateParserTests {
    @Test("the shipped templates parse with their defaults")
    func shippedTemplates() throws {
        let root = TestPaths.packageRoot.appendingPathComponent("templates")
        let campgrounds = try Template.load(path: root.appendingPathComponent("campgrounds.yml").path)
        #expect(campgrounds.dataset == "campgrounds")
        #expect(campgrounds.schemaVersion == 1)
        #expect(campgrounds.tables.map(\.name) == ["campgrounds", "reviews", "photos"])
        let table = try #require(campgrounds.table(named: "campgrounds"))
        #expect(
            table.writable && table.merge == .newestWins && table.exclude == ["internal_notes"]
                && table.primaryKey == nil)
        #expect(campgrounds.table(named: "reviews")?.writable == false)
        #expect(campgrounds.table(named: "photos")?.primaryKey == ["id"])

        let trips = try Template.load(path: root.appendingPathComponent("trips.yml").path)
        #expect(trips.timestamps == Template.Timestamps(created: "createdAt", updated: "updatedAt"))
        #expect(trips.tables == [Template.Table(name: "trips", source: "trips", writable: true, merge: .newestWins)])

        // trips in two schema lines (docs/schema-lines.md): line 1 keeps the old shape.
        let v1 = try Template.load(path: root.appendingPathComponent("trips.v1.yml").path)
        let v2 = try Template.load(path: root.appendingPathComponent("trips.v2.yml").path)
        #expect(v1.dataset == "trips" && v1.schemaVersion == 1 && v2.dataset == "trips" && v2.schemaVersion == 2)
        #expect(v1.tables.first?.exclude == ["seats"] && v1.tables.first?.rename == ["bags": "luggage"])
        try Template.validateLines([(v1, "trips.v1.yml"), (v2, "trips.v2.yml")])
    }

    @Test("defaults: source = name, schemaVersion 1, created_at/updated_at, read-only, newest-wins")
    func defaults() throws {
        let template = try Template.parse(yaml: "dataset: d\ntables:\n  - name: t\n    primaryKey: id\n", path: "x.yml")
        #expect(template.schemaVersion == 1)
        #expect(template.timestamps == Template.Timestamps(created: "created_at", updated: "updated_at"))
        #expect(template.tables == [Template.Table(name: "t", source: "t", primaryKey: ["id"])])
        #expect(template.schema == nil)
    }

    /// (YAML, the key path the error must name, a fragment of the message)
    static let badCases: [(String, String, String)] = [
        ("dataset: d\ntabels: []\n", "tabels", "did you mean `tables`"),
        (
            "dataset: d\ntables:\n  - name: t\n    primarykey: [id]\n", "tables[0].primarykey",
            "did you mean `primaryKey`"
        ),
        ("dataset: d\ntables:\n  - name: t\n    scope: user\n", "tables[0].scope", "unknown key `scope`"),
        ("dataset: d\ntables:\n  - name: t\n    filtre: x\n", "tables[0].filtre", "did you mean `filter`"),
        ("dataset: d\ntables:\n  - name: t\n  - name: u\n    parent: t\n", "tables[1].parent", "must be a mapping"),
        // Access rights (issue 6): the scope section, :scope, parents.
        (
            "dataset: d\ntables:\n  - name: t\n    filter: \"tier <= :scope\"\n", "tables[0].filter",
            "no `scope:` section"
        ),
        (
            "dataset: d\ntables:\n  - name: t\n    query: \"SELECT * FROM t WHERE x = :scope\"\n", "tables[0].query",
            "no `scope:` section"
        ),
        (
            "dataset: d\ntables:\n  - name: t\n  - name: u\n    parent: {table: nope, column: t_id}\n",
            "tables[1].parent.table", "'nope' is not a table of this template"
        ),
        (
            "dataset: d\ntables:\n  - name: t\n    parent: {table: t, column: t_id}\n", "tables[0].parent.table",
            "cannot be its own parent"
        ),
        (
            "dataset: d\ntables:\n  - name: a\n    parent: {table: b, column: b_id}\n  - name: b\n    parent: {table: a, column: a_id}\n",
            "tables[0].parent.table", "parent cycle: a → b → a"
        ),
        (
            "dataset: d\ntables:\n  - name: t\n  - name: u\n    parent: {table: t}\n", "tables[1].parent",
            "needs both keys"
        ),
        (
            "dataset: d\nscope: {token: \"SELECT 1 WHERE $1 = ''\"}\ntables: [{name: t}]\n", "scope.values",
            "missing required key `values`"
        ),
        ("dataset: d\nscope: {values: [1, 2]}\ntables: [{name: t}]\n", "scope.token", "missing required key `token`"),
        (
            "dataset: d\nscope: {values: [], token: \"SELECT 1 WHERE $1 = ''\"}\ntables: [{name: t}]\n", "scope.values",
            "is empty"
        ),
        (
            "dataset: d\nscope: {values: [1, 01], token: \"SELECT 1 WHERE $1 = ''\"}\ntables: [{name: t}]\n",
            "scope.values[1]", "listed twice"
        ),
        (
            "dataset: d\nscope: {values: [1], token: \"SELECT tier FROM users\"}\ntables: [{name: t}]\n", "scope.token",
            "must use $1"
        ),
        ("dataset: d\nscope: {values: [1], tokens: x}\ntables: [{name: t}]\n", "scope.tokens", "did you mean `token`"),
        ("tables:\n  - name: t\n", "dataset", "missing required key `dataset`"),
        ("dataset: d\n", "tables", "missing required key `tables`"),
        ("dataset: Camp Grounds\ntables: [{name: t}]\n", "dataset", "a-z, 0-9"),
        ("dataset: d\ntables: t\n", "tables", "must be a list"),
        ("dataset: d\ntables: []\n", "tables", "is empty"),
        ("dataset: d\nschemaVersion: zero\ntables: [{name: t}]\n", "schemaVersion", "whole number"),
        ("dataset: d\ntables:\n  - source: t\n", "tables[0].name", "missing required key `name`"),
        ("dataset: d\ntables:\n  - name: 1t\n", "tables[0].name", "invalid"),
        ("dataset: d\ntables:\n  - name: ferry_meta\n", "tables[0].name", "reserved"),
        ("dataset: d\ntables:\n  - name: t\n  - name: T\n", "tables[1].name", "appears twice"),
        ("dataset: d\ntables:\n  - name: t\n    source: \"a.b.c\"\n", "tables[0].source", "schema.table"),
        ("dataset: d\ntables:\n  - name: t\n    writable: maybe\n", "tables[0].writable", "true or false"),
        (
            "dataset: d\ntables:\n  - name: t\n    merge: last-wins\n", "tables[0].merge",
            "newest-wins | server-wins | client-wins"
        ),
        (
            "dataset: d\ntables:\n  - name: t\n    merge: {rule: last-wins, per: column}\n", "tables[0].merge.rule",
            "newest-wins | server-wins | client-wins"
        ),
        ("dataset: d\ntables:\n  - name: t\n    merge: {per: column}\n", "tables[0].merge", "needs `rule:`"),
        (
            "dataset: d\ntables:\n  - name: t\n    merge: {rule: newest-wins, per: cell}\n", "tables[0].merge.per",
            "per: column"
        ),
        (
            "dataset: d\ntables:\n  - name: t\n    merge: {rule: newest-wins, adds: [n]}\n", "tables[0].merge.adds",
            "did you mean `add`"
        ),
        (
            "dataset: d\ntables:\n  - name: t\n    merge: {rule: newest-wins, add: [n, n]}\n", "tables[0].merge.add",
            "twice"
        ),
        ("dataset: d\ntables:\n  - name: t\n    primaryKey: []\n", "tables[0].primaryKey", "is empty"),
        ("dataset: d\ntables:\n  - name: t\n    primaryKey: {a: b}\n", "tables[0].primaryKey", "list of column names"),
        ("dataset: d\ntables:\n  - name: t\n    indexes: [DROP TABLE t]\n", "tables[0].indexes[0]", "CREATE INDEX"),
        ("dataset: d\ntables:\n  - name: t\n    query: \"\"\n", "tables[0].query", "query is empty"),
        (
            "dataset: d\ntimestamps: {created: c, modified: m}\ntables: [{name: t}]\n", "timestamps.modified",
            "unknown key `modified`"
        ),
        ("dataset: d\nschema: missing.sql\ntables: [{name: t}]\n", "schema", "not found"),
        ("dataset: d\n  tables: [\n", "", "not valid YAML"),
    ]

    @Test("each bad template names the file, the key path and the fix", arguments: 0..<badCases.count)
    func badTemplate(_ index: Int) throws {
        let (yaml, key, fragment) = Self.badCases[index]
        let dir = try TemporaryDirectory("ferry-badtemplate")
        defer { dir.remove() }
        let path = dir.appending("bad.yml").path
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)

        let error = try #require(ferryError { _ = try Template.load(path: path) })
        #expect(error.code == .badTemplate)
        #expect(error.path == path)
        #expect(error.key == (key.isEmpty ? nil : key))
        #expect(error.description.contains(path))
        #expect(error.description.contains(fragment), "\(error.description)")
    }

    @Test("merge: a plain rule is row-level; a mapping gives the rule, per: column and the additive columns")
    func mergeMapping() throws {
        let template = try Template.parse(
            yaml: """
                dataset: d
                tables:
                  - {name: a, primaryKey: id, merge: server-wins}
                  - {name: b, primaryKey: id, merge: {rule: client-wins, per: column}}
                  - {name: c, primaryKey: id, merge: {rule: newest-wins, add: [visits, on_hand]}}
                  - {name: d, primaryKey: id, merge: {rule: newest-wins, per: row}}
                """, path: "x.yml")
        let merges = template.tables.map {
            "\($0.merge.rawValue) \($0.columnMerge.perColumn) \($0.columnMerge.additive)"
        }
        #expect(
            merges == [
                "server-wins false []", "client-wins true []", "newest-wins false [\"on_hand\", \"visits\"]",
                "newest-wins false []",
            ])
        #expect(template.tables[0].columnMerge.isRowLevel && !template.tables[2].columnMerge.isRowLevel)
    }

    @Test("a missing template file is a clear error")
    func missingFile() {
        let error = ferryError { _ = try Template.load(path: "/nonexistent/t.yml") }
        #expect(error?.code == .badTemplate)
        #expect(error?.description.contains("/nonexistent/t.yml") == true)
    }

    @Test("suggestions come from the allowed keys")
    func suggestions() {
        #expect(TemplateParser.suggestion(for: "exlude", among: TemplateParser.tableKeys) == "exclude")
        #expect(TemplateParser.suggestion(for: "Writable", among: TemplateParser.tableKeys) == "writable")
        #expect(TemplateParser.suggestion(for: "zzzzzzzz", among: TemplateParser.tableKeys) == nil)
    }
}
