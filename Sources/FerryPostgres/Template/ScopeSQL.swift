import FerryCore

/// The `:scope` placeholder and the SQL that selects the rows a scope may see.
///
/// `:scope` in a `filter` or `query` is never replaced by a value. It becomes
/// `current_setting('ferry.scope')::TYPE`, and the value is set per transaction with the bound parameter of
/// `SELECT set_config('ferry.scope', $1, true)` (``setScopeSQL``). TYPE is the type of the scope values
/// (``Template/scopeTypeName(using:)``), so `tier <= :scope` compares numbers, not text.
///
/// ```swift
/// ScopeSQL.substitute("tier <= :scope AND note <> ':scope'", with: "current_setting('ferry.scope')::int4")
/// // "tier <= current_setting('ferry.scope')::int4 AND note <> ':scope'"
/// ```
public enum ScopeSQL {
    /// Sets the scope value of the current transaction; `$1` is the value's text.
    public static let setScopeSQL = "SELECT set_config('ferry.scope', $1, true)"

    /// The expression `:scope` stands for, given the scope type's SQL name (from `format_type`).
    public static func expression(typeName: String) -> String {
        "(current_setting('ferry.scope')::\(typeName))"
    }

    /// Whether `sql` uses the `:scope` placeholder outside string literals, quoted identifiers and comments.
    public static func usesScope(_ sql: String) -> Bool {
        !placeholderRanges(sql).isEmpty
    }

    /// `sql` with every `:scope` placeholder replaced by `expression`.
    public static func substitute(_ sql: String, with expression: String) -> String {
        var out = ""
        var last = sql.startIndex
        for range in placeholderRanges(sql) {
            out += sql[last..<range.lowerBound]
            out += expression
            last = range.upperBound
        }
        out += sql[last...]
        return out
    }

    /// Ranges of `:scope` tokens: not inside `'…'`, `E'…'`, `"…"`, `$tag$…$tag$`, `--` or `/* */`, not the
    /// second colon of a `::` cast, and not followed by an identifier character (`:scoped` is not the placeholder).
    static func placeholderRanges(_ sql: String) -> [Range<String.Index>] {
        let chars = Array(sql.unicodeScalars)
        var indices: [String.Index] = []
        indices.reserveCapacity(chars.count + 1)
        var index = sql.unicodeScalars.startIndex
        while index < sql.unicodeScalars.endIndex {
            indices.append(index)
            index = sql.unicodeScalars.index(after: index)
        }
        indices.append(sql.unicodeScalars.endIndex)

        let word = Array(":scope".unicodeScalars)
        var out: [Range<String.Index>] = []
        var i = 0
        while i < chars.count {
            let c = chars[i]
            let next: Unicode.Scalar? = i + 1 < chars.count ? chars[i + 1] : nil
            if c == "'" {
                let backslashEscapes =
                    i > 0 && (chars[i - 1] == "E" || chars[i - 1] == "e") && (i < 2 || !isIdent(chars[i - 2]))
                i = endOfQuoted(chars, from: i, backslashEscapes: backslashEscapes)
            } else if c == "\"" {
                i = endOfQuoted(chars, from: i, backslashEscapes: false)
            } else if c == "-" && next == "-" {
                while i < chars.count && chars[i] != "\n" { i += 1 }
            } else if c == "/" && next == "*" {
                i = endOfBlockComment(chars, from: i)
            } else if c == "$" && (i == 0 || !isIdent(chars[i - 1])) {
                i = endOfDollarQuote(chars, from: i) ?? i + 1
            } else if c == ":" && next == ":" {
                i += 2  // a cast
            } else if c == ":" {
                let end = i + word.count
                if end <= chars.count && chars[i..<end].elementsEqual(word)
                    && (end == chars.count || !isIdent(chars[end]))
                {
                    out.append(indices[i]..<indices[end])
                    i = end
                } else {
                    i += 1
                }
            } else {
                i += 1
            }
        }
        return out
    }

    /// Whether `c` can stand in an unquoted identifier (or a dollar-quote tag).
    private static func isIdent(_ c: Unicode.Scalar) -> Bool {
        c == "_" || c == "$" || c.properties.isAlphabetic || ("0"..."9").contains(c)
    }

    /// Past the end of the `'…'` or `"…"` that opens at `start` (a doubled quote stays inside; with
    /// `backslashEscapes`, as in `E'…'`, so does a backslash-escaped character).
    private static func endOfQuoted(_ chars: [Unicode.Scalar], from start: Int, backslashEscapes: Bool) -> Int {
        let quote = chars[start]
        var i = start + 1
        while i < chars.count {
            if backslashEscapes && chars[i] == "\\" {
                i += 2
                continue
            }
            if chars[i] == quote {
                if i + 1 < chars.count && chars[i + 1] == quote {
                    i += 2
                    continue
                }
                break
            }
            i += 1
        }
        return i + 1
    }

    /// Past the end of the (nestable) `/* … */` comment that opens at `start`.
    private static func endOfBlockComment(_ chars: [Unicode.Scalar], from start: Int) -> Int {
        var depth = 1
        var i = start + 2
        while i < chars.count && depth > 0 {
            if chars[i] == "/" && i + 1 < chars.count && chars[i + 1] == "*" {
                depth += 1
                i += 2
            } else if chars[i] == "*" && i + 1 < chars.count && chars[i + 1] == "/" {
                depth -= 1
                i += 2
            } else {
                i += 1
            }
        }
        return i
    }

    /// Past the end of the `$tag$ … $tag$` that opens at `start` (the tag may be empty; an unclosed one runs to
    /// the end), or nil when the `$` opens no dollar quote (a `$1` parameter is none).
    private static func endOfDollarQuote(_ chars: [Unicode.Scalar], from start: Int) -> Int? {
        var j = start + 1
        while j < chars.count && chars[j] != "$" && isIdent(chars[j])
            && !(j == start + 1 && ("0"..."9").contains(chars[j]))
        { j += 1 }
        guard j < chars.count, chars[j] == "$" else { return nil }
        let tag = chars[start...j]
        var k = j + 1
        while k + tag.count <= chars.count {
            if chars[k..<(k + tag.count)].elementsEqual(tag) { return k + tag.count }
            k += 1
        }
        return chars.count
    }
}

extension Template {
    /// `SELECT * FROM … WHERE …`: the rows of table `index` that are exported, after its `filter` and its parent
    /// chain, with `:scope` standing for `scopeExpression` (nil when the template has no scope). Every parent must
    /// have a resolved single-column primary key (``resolvingPrimaryKeys(using:)``). For a table with neither filter
    /// nor parent, this is the plain query of the issues before, so unscoped snapshots are unchanged.
    ///
    /// ```swift
    /// template.rowsSQL(tableAt: 1, scopeExpression: ScopeSQL.expression(typeName: "smallint"))
    /// // SELECT * FROM "reviews" AS ferry_t1 WHERE ferry_t1."campground_id" IN (SELECT ferry_p1."id" FROM (…) AS ferry_p1)
    /// ```
    public func rowsSQL(tableAt index: Int, scopeExpression: String?) -> String {
        rowsSQL(tableAt: index, scopeExpression: scopeExpression, depth: 0)
    }

    private func rowsSQL(tableAt index: Int, scopeExpression: String?, depth: Int) -> String {
        let table = tables[index]
        func bind(_ sql: String) -> String {
            guard let scopeExpression else { return sql }
            return ScopeSQL.substitute(sql, with: scopeExpression)
        }
        let source = table.query.map { "(\(bind($0)))" } ?? SQLIdentifier.quoteQualified(table.source)
        let alias = "ferry_t\(depth)"
        let placed = scopeExpression.flatMap {
            partitionCondition(tableAt: index, alias: alias, scopeExpression: $0)
        }
        guard table.filter != nil || table.parent != nil || placed != nil else {
            return table.query.map(bind) ?? "SELECT * FROM \(source)"
        }
        var conditions: [String] = []
        if let filter = table.filter { conditions.append("(\(bind(filter)))") }
        if let placed { conditions.append(placed) }
        if let parent = table.parent, let parentIndex = tables.firstIndex(where: { $0.name == parent.table }),
            let parentKey = tables[parentIndex].primaryKey?.first.map(tables[parentIndex].sourceColumn(of:))
        {
            let inner = "ferry_p\(depth)"
            let parentRows = rowsSQL(tableAt: parentIndex, scopeExpression: scopeExpression, depth: depth + 1)
            conditions.append(
                "\(alias).\(SQLIdentifier.quote(parent.column)) IN (SELECT \(inner).\(SQLIdentifier.quote(parentKey)) FROM (\(parentRows)) AS \(inner))"
            )
        }
        return "SELECT * FROM \(source) AS \(alias) WHERE \(conditions.joined(separator: " AND "))"
    }

    /// The SQL type `:scope` binds as (the scope values' type), after checking both scope queries against
    /// PostgreSQL; nil for a template without `scope:`. Errors name the template and the key (`scope.token`).
    ///
    /// ```swift
    /// let type = try template.scopeTypeName(using: pg)   // "smallint"
    /// let expression = type.map(ScopeSQL.expression(typeName:))
    /// ```
    public func scopeTypeName(using pg: PostgresConnection) throws -> String? {
        try TemplateValidator.scopeTypeName(for: self, pg: pg)
    }
}
