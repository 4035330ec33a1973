import FerryCore
import Yams

/// One entry of `tables:`, and the checks that span the tables.
extension TemplateParser {
    func parseTable(_ node: Node, index i: Int) throws -> Template.Table {
        let at = "tables[\(i)]"
        let map = try mapping(node, key: at, allowed: Self.tableKeys)
        guard let nameNode = map["name"] else {
            throw fail(
                "\(at).name", "missing required key `name` (the SQLite table name), e.g. `- name: campgrounds`",
                at: node)
        }
        var table = Template.Table(name: try tableName(nameNode, at: at))
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
            table.query = try trimmedSQL(
                node, key: "\(at).query", ifEmpty: "query is empty: write a SELECT or remove the key")
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
        if let node = map["indexes"] { table.indexes = try parseIndexes(node, table: table.name, at: at) }
        if let node = map["writable"] {
            guard let scalar = node.scalar, let value = Bool.construct(from: scalar) else {
                throw fail("\(at).writable", "writable must be true or false", at: node)
            }
            table.writable = value
        }
        if let node = map["merge"] { (table.merge, table.columnMerge) = try parseMerge(node, at: at) }
        if let node = map["filter"] { table.filter = try trimmedSQL(node, key: "\(at).filter") }
        if let node = map["parent"] { table.parent = try parseParent(node, at: at) }
        if let node = map["partition"] { table.partition = try column(node, key: "\(at).partition") }
        if let node = map["rename"] { table.rename = try parseRename(node, table: table, at: at) }
        if let node = map["attachments"] { table.attachments = try parseAttachments(node, at: at) }
        try checkKeyKept(table, at: at, node: map["primaryKey"])
        return table
    }

    /// A table's `name:`: a plain SQLite name that SQLite and Ferry do not reserve.
    func tableName(_ node: Node, at: String) throws -> String {
        let name = try string(node, key: "\(at).name")
        guard SQLIdentifier.isPlain(name) else {
            throw fail(
                "\(at).name",
                "table name '\(name)' is invalid: use letters, digits and '_' (not starting with a digit)", at: node
            )
        }
        let lower = name.lowercased()
        guard !lower.hasPrefix("sqlite_"), !lower.hasPrefix("ferry_") else {
            throw fail(
                "\(at).name",
                "table name '\(name)' is reserved: names starting with sqlite_ or ferry_ belong to SQLite and Ferry",
                at: node)
        }
        return name
    }

    /// `indexes:`, each a `CREATE [UNIQUE] INDEX` statement.
    func parseIndexes(_ node: Node, table name: String, at: String) throws -> [String] {
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
        return statements
    }

    /// `parent: { table: campgrounds, column: campground_id }`.
    func parseParent(_ node: Node, at: String) throws -> Template.Parent {
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
        return Template.Parent(table: parentTable, column: try column(columnNode, key: "\(at).parent.column"))
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
}

extension TemplateParser {
    /// `merge: newest-wins`, or `merge: {rule: newest-wins, per: column, add: [on_hand]}`.
    func parseMerge(_ node: Node, at: String) throws -> (MergeRule, ColumnMerge) {
        func rule(_ node: Node, key: String) throws -> MergeRule {
            let text = try string(node, key: key)
            do {
                return try MergeRule(parsing: text)
            } catch let error as FerryError {
                throw fail(key, error.message, at: node)
            }
        }
        guard case .mapping = node else { return (try rule(node, key: "\(at).merge"), .rowLevel) }
        let map = try mapping(node, key: "\(at).merge", allowed: ["rule", "per", "add"])
        guard let ruleNode = map["rule"] else {
            throw fail(
                "\(at).merge", "`merge:` as a mapping needs `rule:`, e.g. `{rule: newest-wins, per: column}`", at: node)
        }
        var columns = ColumnMerge.rowLevel
        if let per = map["per"] {
            switch try string(per, key: "\(at).merge.per") {
            case "column": columns.perColumn = true
            case "row": columns.perColumn = false
            case let other:
                throw fail("\(at).merge.per", "unknown `per: \(other)`: use `per: column` or `per: row`", at: per)
            }
        }
        if let add = map["add"] {
            let names = try columnList(add, key: "\(at).merge.add")
            guard Set(names).count == names.count else {
                throw fail("\(at).merge.add", "`add:` names a column twice", at: add)
            }
            columns.additive = names.sorted()
        }
        return (try rule(ruleNode, key: "\(at).merge.rule"), columns)
    }

    /// `attachments: { image: {download: eager}, scan: {download: on-demand} }` (`{}` means eager).
    func parseAttachments(_ node: Node, at: String) throws -> [String: Attachment.Download] {
        guard case .mapping(let entries) = node else {
            throw fail(
                "\(at).attachments",
                "`attachments` must map each column that holds an attachment's SHA-256 to its options, e.g. `attachments: { image: {download: eager} }`",
                at: node)
        }
        var out: [String: Attachment.Download] = [:]
        for (k, v) in entries {
            let name = try column(k, key: "\(at).attachments")
            let key = "\(at).attachments.\(name)"
            guard out[name] == nil else { throw fail(key, "column '\(name)' is listed twice: keep one", at: k) }
            var download = Attachment.Download.eager
            if case .scalar(let scalar) = v, scalar.string.isEmpty || scalar.string == "~" {
                out[name] = download
                continue
            }
            let options = try mapping(v, key: key, allowed: ["download"])
            if let d = options["download"] {
                let text = try string(d, key: "\(key).download")
                guard let value = Attachment.Download(rawValue: text) else {
                    throw fail("\(key).download", "unknown `download: \(text)`: use `eager` or `on-demand`", at: d)
                }
                download = value
            }
            out[name] = download
        }
        return out
    }
}
