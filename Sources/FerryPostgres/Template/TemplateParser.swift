import FerryCore
import Foundation
import Yams

/// Reads template YAML into a ``Template``, strictly: every error names the file, the key path and the fix.
struct TemplateParser {
    let path: String

    static let topKeys = ["dataset", "schemaVersion", "timestamps", "tables", "schema", "scope", "partition"]
    static let scopeKeys = ["values", "token", "claim"]
    static let parentKeys = ["table", "column"]
    static let timestampKeys = ["created", "updated"]
    static let tableKeys = [
        "name", "source", "query", "primaryKey", "exclude", "indexes", "writable", "merge", "filter", "parent",
        "rename", "attachments", "partition",
    ]

    func fail(_ key: String?, _ message: String, at node: Node? = nil) -> FerryError {
        var text = message
        if let mark = node?.mark { text += " (line \(mark.line))" }
        return FerryError(.badTemplate, text, path: path, key: key)
    }

    func parse(_ yaml: String) throws -> Template {
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch let error as YamlError {
            throw FerryError(
                .badTemplate, "not valid YAML: \(Self.describe(error)); fix the syntax at that line", path: path)
        } catch {
            throw FerryError(.badTemplate, "not valid YAML: \(error)", path: path)
        }
        guard let root else {
            throw fail(nil, "the template is empty: it needs at least `dataset:` and `tables:` (see docs/templates.md)")
        }
        let top = try mapping(root, key: nil, allowed: Self.topKeys)

        guard let datasetNode = top["dataset"] else {
            throw fail("dataset", "missing required key `dataset`: add e.g. `dataset: campgrounds`")
        }
        let dataset = try string(datasetNode, key: "dataset")
        guard DatasetName.isValidBase(dataset) else {
            throw fail(
                "dataset", "dataset name '\(dataset)' is invalid: use 1-64 characters from a-z, 0-9, '_' and '-'",
                at: datasetNode)
        }

        var schemaVersion = 1
        if let node = top["schemaVersion"] {
            guard let scalar = node.scalar, let value = Int(scalar.string), value >= 1 else {
                throw fail(
                    "schemaVersion", "schemaVersion must be a whole number >= 1, e.g. `schemaVersion: 1`", at: node)
            }
            schemaVersion = value
        }

        var timestamps = Template.Timestamps()
        if let node = top["timestamps"] {
            let map = try mapping(node, key: "timestamps", allowed: Self.timestampKeys)
            if let created = map["created"] { timestamps.created = try column(created, key: "timestamps.created") }
            if let updated = map["updated"] { timestamps.updated = try column(updated, key: "timestamps.updated") }
        }

        let (tables, sequence) = try parseTables(top["tables"])
        let schema = try top["schema"].map(parseSchemaPath)
        let scope = try top["scope"].map(parseScope)
        let partition = try top["partition"].map(parsePartition)
        if partition == nil { try checkScopeUse(tables, scope: scope, sequence: sequence) }
        try checkParents(tables, sequence: sequence)
        try checkPartitions(tables, partition: partition, scope: scope, node: top["partition"], sequence: sequence)
        var template = Template(
            path: path, dataset: dataset, schemaVersion: schemaVersion, timestamps: timestamps, tables: tables,
            schema: schema, scope: scope)
        template.partition = partition
        return template
    }

    /// `tables:`, a non-empty list of tables with distinct names, and its nodes (for the checks across tables).
    func parseTables(_ tablesNode: Node?) throws -> ([Template.Table], Node.Sequence) {
        guard let tablesNode else {
            throw fail(
                "tables", "missing required key `tables`: list the tables to export, e.g. `tables: [{name: trips}]`")
        }
        guard case .sequence(let sequence) = tablesNode else {
            throw fail(
                "tables", "`tables` must be a list of tables (each item starting with `- name:`)", at: tablesNode)
        }
        guard !sequence.isEmpty else {
            throw fail("tables", "`tables` is empty: list at least one table", at: tablesNode)
        }
        var tables: [Template.Table] = []
        var seen: Set<String> = []
        for (i, node) in sequence.enumerated() {
            let table = try parseTable(node, index: i)
            guard seen.insert(table.name.lowercased()).inserted else {
                throw fail(
                    "tables[\(i)].name",
                    "table name '\(table.name)' appears twice: SQLite table names must be unique (case-insensitive)",
                    at: node)
            }
            tables.append(table)
        }
        return (tables, sequence)
    }

    /// `schema:`, a readable file relative to the template's folder: its standardized absolute path.
    func parseSchemaPath(_ node: Node) throws -> String {
        let file = try string(node, key: "schema")
        let base = URL(fileURLWithPath: path).deletingLastPathComponent()
        let resolved = file.hasPrefix("/") ? URL(fileURLWithPath: file) : base.appendingPathComponent(file)
        guard FileManager.default.isReadableFile(atPath: resolved.path) else {
            throw fail(
                "schema",
                "schema file '\(file)' not found at \(resolved.path): the path is relative to the template's folder",
                at: node)
        }
        return resolved.standardizedFileURL.path
    }

    func parseScope(_ node: Node) throws -> Template.Scope {
        let map = try mapping(node, key: "scope", allowed: Self.scopeKeys)
        guard let valuesNode = map["values"] else {
            throw fail(
                "scope.values",
                "missing required key `values`: a one-column SELECT (`SELECT DISTINCT access_tier FROM users`) or a list (`[0, 1, 2]`)",
                at: node)
        }
        let values: Template.Scope.Values
        switch valuesNode {
        case .sequence(let items):
            guard !items.isEmpty else {
                throw fail("scope.values", "the list of scope values is empty: give at least one value", at: valuesNode)
            }
            var list: [String] = []
            for (i, item) in items.enumerated() {
                var text = try string(item, key: "scope.values[\(i)]")
                if let number = Int(text) { text = String(number) }
                guard !list.contains(text) else {
                    throw fail("scope.values[\(i)]", "scope value '\(text)' is listed twice", at: item)
                }
                list.append(text)
            }
            values = .list(list)
        default:
            let query = try trimmedSQL(valuesNode, key: "scope.values")
            values = .query(query)
        }
        guard !ScopeSQL.usesScope(values.query ?? "") else {
            throw fail("scope", "`:scope` cannot be used inside the scope section itself", at: node)
        }
        switch (map["token"], map["claim"]) {
        case (nil, nil):
            throw fail(
                "scope.token",
                "missing required key `token` or `claim`: a SELECT mapping $1, the SHA-256 hex of a bearer token, to its scope (`SELECT access_tier FROM users WHERE api_token_sha256 = $1`), or the JWT claim holding it (`claim: team`)",
                at: node)
        case (.some, .some):
            throw fail(
                "scope.claim",
                "give either `token` (opaque tokens looked up in PostgreSQL) or `claim` (JWTs from an identity provider), not both",
                at: node)
        case (nil, let claimNode?):
            let text = try string(claimNode, key: "scope.claim")
            guard let path = ClaimPath(text) else {
                throw fail(
                    "scope.claim",
                    "'\(text)' is not a claim path: name a claim (`team`) or a member of an object claim (`realm_access.team`)",
                    at: claimNode)
            }
            return Template.Scope(values: values, claim: path)
        case (let tokenNode?, nil):
            let token = try tokenQuery(
                tokenNode, key: "scope.token", what: "token", example: "… WHERE api_token_sha256 = $1")
            guard !ScopeSQL.usesScope(token) else {
                throw fail("scope", "`:scope` cannot be used inside the scope section itself", at: node)
            }
            return Template.Scope(values: values, token: token)
        }
    }

    /// A query over a bearer token (`scope.token`, `partition.access`): SQL that uses `$1`, the token's SHA-256 hex.
    func tokenQuery(_ node: Node, key: String, what: String, example: String) throws -> String {
        let sql = try trimmedSQL(node, key: key)
        guard sql.contains("$1") else {
            throw fail(
                key, "the \(what) query must use $1 (the SHA-256 hex of the bearer token), e.g. `\(example)`", at: node)
        }
        return sql
    }

    /// A SQL text value without surrounding blanks or trailing semicolons; an empty one fails with `ifEmpty`
    /// (by default: "`key` is empty: write the SQL or remove the key").
    func trimmedSQL(_ node: Node, key: String, ifEmpty: String? = nil) throws -> String {
        var sql = try string(node, key: key).trimmingCharacters(in: .whitespacesAndNewlines)
        while sql.hasSuffix(";") { sql = String(sql.dropLast()).trimmingCharacters(in: .whitespacesAndNewlines) }
        guard !sql.isEmpty else {
            throw fail(key, ifEmpty ?? "`\(key)` is empty: write the SQL or remove the key", at: node)
        }
        return sql
    }
}
