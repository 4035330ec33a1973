import FerryCore
import Foundation
import Yams

/// Reads template YAML into a ``Template``, strictly: every error names the file, the key path and the fix.
struct TemplateParser {
    let path: String

    static let topKeys = ["dataset", "schemaVersion", "timestamps", "tables", "schema", "scope"]
    static let scopeKeys = ["values", "token"]
    static let parentKeys = ["table", "column"]
    static let timestampKeys = ["created", "updated"]
    static let tableKeys = [
        "name", "source", "query", "primaryKey", "exclude", "indexes", "writable", "merge", "filter", "parent",
        "rename",
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

        guard let tablesNode = top["tables"] else {
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

        var schema: String?
        if let node = top["schema"] {
            let file = try string(node, key: "schema")
            let base = URL(fileURLWithPath: path).deletingLastPathComponent()
            let resolved = file.hasPrefix("/") ? URL(fileURLWithPath: file) : base.appendingPathComponent(file)
            guard FileManager.default.isReadableFile(atPath: resolved.path) else {
                throw fail(
                    "schema",
                    "schema file '\(file)' not found at \(resolved.path): the path is relative to the template's folder",
                    at: node)
            }
            schema = resolved.standardizedFileURL.path
        }
        var scope: Template.Scope?
        if let node = top["scope"] { scope = try parseScope(node) }
        try checkScopeUse(tables, scope: scope, sequence: sequence)
        try checkParents(tables, sequence: sequence)
        return Template(
            path: path, dataset: dataset, schemaVersion: schemaVersion, timestamps: timestamps, tables: tables,
            schema: schema, scope: scope)
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
        guard let tokenNode = map["token"] else {
            throw fail(
                "scope.token",
                "missing required key `token`: a SELECT mapping $1, the SHA-256 hex of a bearer token, to its scope, e.g. `SELECT access_tier FROM users WHERE api_token_sha256 = $1`",
                at: node)
        }
        let token = try trimmedSQL(tokenNode, key: "scope.token")
        guard token.contains("$1") else {
            throw fail(
                "scope.token",
                "the token query must use $1 (the SHA-256 hex of the bearer token), e.g. `… WHERE api_token_sha256 = $1`",
                at: tokenNode)
        }
        guard !ScopeSQL.usesScope(token), !ScopeSQL.usesScope(values.query ?? "") else {
            throw fail("scope", "`:scope` cannot be used inside the scope section itself", at: node)
        }
        return Template.Scope(values: values, token: token)
    }

    /// A `:scope` needs a `scope:` section.
    func checkScopeUse(_ tables: [Template.Table], scope: Template.Scope?, sequence: Node.Sequence) throws {
        guard scope == nil else { return }
        for (i, table) in tables.enumerated() {
            if let filter = table.filter, ScopeSQL.usesScope(filter) {
                throw fail(
                    "tables[\(i)].filter",
                    "table '\(table.name)': the filter uses :scope but the template has no `scope:` section; add one (see docs/templates.md) or remove :scope",
                    at: sequence[i])
            }
            if let query = table.query, ScopeSQL.usesScope(query) {
                throw fail(
                    "tables[\(i)].query",
                    "table '\(table.name)': the query uses :scope but the template has no `scope:` section; add one (see docs/templates.md) or remove :scope",
                    at: sequence[i])
            }
        }
    }

    /// Every parent is another table of the template, and following parents never comes back to a table.
    func checkParents(_ tables: [Template.Table], sequence: Node.Sequence) throws {
        for (i, table) in tables.enumerated() {
            guard let parent = table.parent else { continue }
            let at = "tables[\(i)].parent.table"
            guard parent.table != table.name else {
                throw fail(at, "table '\(table.name)' cannot be its own parent", at: sequence[i])
            }
            guard tables.contains(where: { $0.name == parent.table }) else {
                let names = tables.map(\.name).filter { $0 != table.name }
                var message = "table '\(table.name)': parent '\(parent.table)' is not a table of this template"
                if let guess = Self.suggestion(for: parent.table, among: names) {
                    message += "; did you mean `\(guess)`?"
                }
                message += " Tables: \(names.joined(separator: ", "))"
                throw fail(at, message, at: sequence[i])
            }
            var chain = [table.name]
            var current = parent.table
            while let next = tables.first(where: { $0.name == current }) {
                if chain.contains(current) {
                    throw fail(
                        at,
                        "parent cycle: \((chain + [current]).joined(separator: " → ")); a parent chain must end at a table without a parent",
                        at: sequence[i])
                }
                chain.append(current)
                guard let up = next.parent?.table else { break }
                current = up
            }
        }
    }

    /// A SQL text value without surrounding blanks or trailing semicolons.
    func trimmedSQL(_ node: Node, key: String) throws -> String {
        var sql = try string(node, key: key).trimmingCharacters(in: .whitespacesAndNewlines)
        while sql.hasSuffix(";") { sql = String(sql.dropLast()).trimmingCharacters(in: .whitespacesAndNewlines) }
        guard !sql.isEmpty else { throw fail(key, "`\(key)` is empty: write the SQL or remove the key", at: node) }
        return sql
    }

    func parseTable(_ node: Node, index i: Int) throws -> Template.Table {
        let at = "tables[\(i)]"
        let map = try mapping(node, key: at, allowed: Self.tableKeys)
        guard let nameNode = map["name"] else {
            throw fail(
                "\(at).name", "missing required key `name` (the SQLite table name), e.g. `- name: campgrounds`",
                at: node)
        }
        let name = try string(nameNode, key: "\(at).name")
        guard SQLIdentifier.isPlain(name) else {
            throw fail(
                "\(at).name",
                "table name '\(name)' is invalid: use letters, digits and '_' (not starting with a digit)", at: nameNode
            )
        }
        let lower = name.lowercased()
        guard !lower.hasPrefix("sqlite_"), !lower.hasPrefix("ferry_") else {
            throw fail(
                "\(at).name",
                "table name '\(name)' is reserved: names starting with sqlite_ or ferry_ belong to SQLite and Ferry",
                at: nameNode)
        }
        var table = Template.Table(name: name)
        if let node = map["source"] {
            let source = try string(node, key: "\(at).source")
            guard SQLIdentifier.isQualified(source) else {
                throw fail(
                    "\(at).source",
                    "source '\(source)' is not a table name: write `table` or `schema.table` (letters, digits, '_')",
                    at: node)
            }
            table.source = source
        }
        if let node = map["query"] {
            var query = try string(node, key: "\(at).query").trimmingCharacters(in: .whitespacesAndNewlines)
            while query.hasSuffix(";") {
                query = String(query.dropLast()).trimmingCharacters(in: .whitespacesAndNewlines)
            }
            guard !query.isEmpty else {
                throw fail("\(at).query", "query is empty: write a SELECT or remove the key", at: node)
            }
            table.query = query
        }
        if let node = map["primaryKey"] {
            let columns = try columnList(node, key: "\(at).primaryKey")
            guard !columns.isEmpty else {
                throw fail(
                    "\(at).primaryKey",
                    "primaryKey is empty: name the key column(s), e.g. `primaryKey: [id]`, or remove the key to use the source's",
                    at: node)
            }
            table.primaryKey = columns
        }
        if let node = map["exclude"] { table.exclude = try columnList(node, key: "\(at).exclude") }
        if let node = map["indexes"] {
            let statements = try stringList(node, key: "\(at).indexes")
            for (j, sql) in statements.enumerated() {
                let words = sql.split(whereSeparator: \.isWhitespace).prefix(3).map { $0.uppercased() }
                guard words.starts(with: ["CREATE", "INDEX"]) || words.starts(with: ["CREATE", "UNIQUE", "INDEX"])
                else {
                    throw fail(
                        "\(at).indexes[\(j)]", "each index must be a `CREATE INDEX name ON \(name)(column)` statement",
                        at: node)
                }
            }
            table.indexes = statements
        }
        if let node = map["writable"] {
            guard let scalar = node.scalar, let value = Bool.construct(from: scalar) else {
                throw fail("\(at).writable", "writable must be true or false", at: node)
            }
            table.writable = value
        }
        if let node = map["merge"] {
            let text = try string(node, key: "\(at).merge")
            do {
                table.merge = try MergeRule(parsing: text)
            } catch let error as FerryError {
                throw fail("\(at).merge", error.message, at: node)
            }
        }
        if let node = map["filter"] { table.filter = try trimmedSQL(node, key: "\(at).filter") }
        if let node = map["parent"] {
            let parent = try mapping(node, key: "\(at).parent", allowed: Self.parentKeys)
            guard let tableNode = parent["table"], let columnNode = parent["column"] else {
                throw fail(
                    "\(at).parent", "parent needs both keys: `parent: { table: campgrounds, column: campground_id }`",
                    at: node)
            }
            let parentTable = try string(tableNode, key: "\(at).parent.table")
            guard SQLIdentifier.isPlain(parentTable) else {
                throw fail("\(at).parent.table", "'\(parentTable)' is not a table name of this template", at: tableNode)
            }
            table.parent = Template.Parent(
                table: parentTable, column: try column(columnNode, key: "\(at).parent.column"))
        }
        if let node = map["rename"] { table.rename = try parseRename(node, table: table, at: at) }
        try checkKeyKept(table, at: at, node: map["primaryKey"])
        return table
    }

    /// `rename: { sqlite_name: postgres_name }`. Each PostgreSQL column is shown once, and an excluded one cannot
    /// be shown at all; clashes with the other exported columns need the catalog (TemplateValidator+Plans).
    func parseRename(_ node: Node, table: Template.Table, at: String) throws -> [String: String] {
        guard case .mapping(let mapping) = node else {
            throw fail(
                "\(at).rename",
                "`rename` must be a mapping from the SQLite column name to the PostgreSQL column it shows, e.g. `rename: { title: name }`",
                at: node)
        }
        var out: [String: String] = [:]
        for (k, v) in mapping {
            let name = try column(k, key: "\(at).rename")
            let key = "\(at).rename.\(name)"
            guard out[name] == nil else { throw fail(key, "SQLite column '\(name)' is renamed twice: keep one", at: k) }
            let source = try column(v, key: key)
            if let other = out.first(where: { $0.value == source })?.key {
                throw fail(
                    key,
                    "table '\(table.name)': PostgreSQL column '\(source)' is already shown as '\(other)'; each PostgreSQL column can be renamed once",
                    at: v)
            }
            if table.exclude.contains(source) {
                throw fail(
                    key,
                    "table '\(table.name)': PostgreSQL column '\(source)' is excluded, so there is nothing to show as '\(name)'; drop one of the two",
                    at: v)
            }
            out[name] = source
        }
        return out
    }

    /// A snapshot keeps every key column: a `primaryKey:` column (an SQLite name) that is excluded or renamed away
    /// is refused here, before PostgreSQL is asked (a key missing from `query:`'s output is found by the publisher).
    func checkKeyKept(_ table: Template.Table, at: String, node: Node?) throws {
        for (j, key) in (table.primaryKey ?? []).enumerated() {
            let source = table.sourceColumn(of: key)
            if table.exclude.contains(source) {
                throw fail(
                    "\(at).primaryKey[\(j)]",
                    "table '\(table.name)': key column '\(key)' is excluded; a snapshot needs every key column: remove it from `exclude:`",
                    at: node)
            }
            if table.rename[key] == nil, let shown = table.rename.first(where: { $0.value == key })?.key {
                throw fail(
                    "\(at).primaryKey[\(j)]",
                    "table '\(table.name)': key column '\(key)' is renamed to '\(shown)' by `rename:`; primaryKey names SQLite columns: write '\(shown)'",
                    at: node)
            }
        }
    }

    // MARK: - Typed readers

    /// A mapping with string keys, rejecting keys not in `allowed` with a "did you mean" hint.
    func mapping(_ node: Node, key: String?, allowed: [String]) throws -> [String: Node] {
        guard case .mapping(let mapping) = node else {
            throw fail(
                key, "\(key.map { "`\($0)`" } ?? "the template") must be a mapping of `key: value` lines", at: node)
        }
        var out: [String: Node] = [:]
        for (k, v) in mapping {
            guard let name = k.scalar?.string else { throw fail(key, "keys must be plain words", at: k) }
            let full = key.map { "\($0).\(name)" } ?? name
            guard allowed.contains(name) else {
                var message = "unknown key `\(name)`"
                if let guess = Self.suggestion(for: name, among: allowed) { message += "; did you mean `\(guess)`?" }
                message += " Allowed here: \(allowed.joined(separator: ", "))"
                throw fail(full, message, at: k)
            }
            guard out[name] == nil else { throw fail(full, "key `\(name)` appears twice: keep one", at: k) }
            out[name] = v
        }
        return out
    }

    func string(_ node: Node, key: String) throws -> String {
        guard let scalar = node.scalar, !(scalar.style == .plain && scalar.string.isEmpty) else {
            throw fail(key, "`\(key)` must be a text value", at: node)
        }
        if scalar.style == .plain, ["~", "null", "Null", "NULL"].contains(scalar.string) {
            throw fail(key, "`\(key)` must be a text value, not null", at: node)
        }
        return scalar.string
    }

    func column(_ node: Node, key: String) throws -> String {
        let name = try string(node, key: key)
        guard SQLIdentifier.isQuotable(name) else {
            throw fail(key, "'\(name)' is not a column name: 1-63 bytes, no control characters", at: node)
        }
        return name
    }

    /// A list of strings; a single scalar counts as a one-item list.
    func stringList(_ node: Node, key: String) throws -> [String] {
        switch node {
        case .scalar: return [try string(node, key: key)]
        case .sequence(let items):
            return try items.enumerated().map { try string($0.element, key: "\(key)[\($0.offset)]") }
        default: throw fail(key, "`\(key)` must be a list, e.g. `[a, b]`", at: node)
        }
    }

    func columnList(_ node: Node, key: String) throws -> [String] {
        switch node {
        case .scalar: return [try column(node, key: key)]
        case .sequence(let items):
            return try items.enumerated().map { try column($0.element, key: "\(key)[\($0.offset)]") }
        default: throw fail(key, "`\(key)` must be a list of column names, e.g. `[id]`", at: node)
        }
    }

    // MARK: - Hints

    /// The allowed key closest to `word` (edit distance ≤ 3 or a case-only difference), if any.
    static func suggestion(for word: String, among candidates: [String]) -> String? {
        if let same = candidates.first(where: { $0.lowercased() == word.lowercased() }) { return same }
        let scored = candidates.map { ($0, editDistance(word.lowercased(), $0.lowercased())) }
        guard let best = scored.min(by: { $0.1 < $1.1 }), best.1 <= max(1, min(3, word.count / 2)) else { return nil }
        return best.0
    }

    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8)
        let b = Array(b.utf8)
        var previous = Array(0...b.count)
        for i in 1...max(a.count, 1) where !a.isEmpty {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...max(b.count, 1) where !b.isEmpty {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return a.isEmpty ? b.count : previous[b.count]
    }

    static func describe(_ error: YamlError) -> String {
        switch error {
        case .scanner(_, let problem, let mark, _), .parser(_, let problem, let mark, _),
            .composer(_, let problem, let mark, _):
            return "\(problem) at line \(mark.line), column \(mark.column)"
        default:
            return "\(error)"
        }
    }
}
