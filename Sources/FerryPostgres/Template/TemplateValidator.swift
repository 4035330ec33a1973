import FerryCore

/// Checks a parsed template against PostgreSQL's catalog: source tables exist, primary keys, the scope queries and
/// their type. Shared by the publisher (which resolves each table into an export plan in
/// `TemplateValidator+Plans.swift`) and the server (token checks, merge tables). Every error names the template
/// file, the table's key path and the fix.
package enum TemplateValidator {
    package static func fail(_ template: Template, _ key: String, _ message: String) -> FerryError {
        FerryError(.badTemplate, message, path: template.path, key: key)
    }

    /// The SQL type of the scope values (`format_type` of the values query's column; `bigint` for a list of
    /// integers, else `text`), and checks that both scope queries are one-column SELECTs.
    package static func scopeTypeName(for template: Template, pg: PostgresConnection) throws -> String? {
        if template.partition != nil { return try partitionKeyTypeName(for: template, pg: pg) }
        guard let scope = template.scope else { return nil }
        do {
            // A claim check asks PostgreSQL nothing about tokens.
            if let sql = scope.token {
                let token = try pg.describe(sql)
                guard token.count == 1 else {
                    throw fail(
                        template, "scope.token",
                        "the token query returns \(token.count) columns; it must return one: the scope value")
                }
            }
        } catch let error as FerryError where error.code == .database {
            throw fail(
                template, "scope.token",
                "the token query fails in PostgreSQL: \(error.message); it must be one SELECT using $1, the token's SHA-256 hex"
            )
        }
        switch scope.values {
        case .list(let values):
            return values.allSatisfy { Int($0) != nil } ? "bigint" : "text"
        case .query(let sql):
            let columns: [(name: String, oid: UInt32)]
            do { columns = try pg.describe(sql) } catch let error as FerryError {
                throw fail(
                    template, "scope.values",
                    "the scope values query fails in PostgreSQL: \(error.message); it must be one SELECT of one column")
            }
            guard columns.count == 1 else {
                throw fail(
                    template, "scope.values",
                    "the scope values query returns \(columns.count) columns; it must return one")
            }
            return try typeName(oid: columns[0].oid, template: template, key: "scope.values", pg: pg)
        }
    }

    /// `format_type` of `oid`, the type of the values a query at `key` returns.
    static func typeName(oid: UInt32, template: Template, key: String, pg: PostgresConnection) throws -> String {
        let rows = try pg.query("SELECT format_type($1::oid, NULL)", [String(oid)])
        guard let name = rows.first?.first ?? nil else {
            throw fail(template, key, "cannot name the type of the values of `\(key)` (oid \(oid))")
        }
        return name
    }

    /// The SQL type of the partition keys, after checking that the values query and the access query are one-column
    /// SELECTs PostgreSQL accepts.
    static func partitionKeyTypeName(for template: Template, pg: PostgresConnection) throws -> String {
        let key = template.partition?.values == nil ? "partition.key" : "partition.values"
        let columns: [(name: String, oid: UInt32)]
        do { columns = try pg.describe(template.partitionValuesSQL ?? "") } catch let error as FerryError {
            throw fail(
                template, key,
                "the partition keys cannot be read: \(error.message); check `partition.table`, `partition.key` and `partition.values`"
            )
        }
        guard columns.count == 1 else {
            throw fail(template, key, "the partition values query returns \(columns.count) columns; it must return one")
        }
        if let access = template.partition?.access {
            let answer: [(name: String, oid: UInt32)]
            do { answer = try pg.describe(access) } catch let error as FerryError {
                throw fail(
                    template, "partition.access",
                    "the access query fails in PostgreSQL: \(error.message); it must be one SELECT using $1, the token's SHA-256 hex"
                )
            }
            guard answer.count == 1 else {
                throw fail(
                    template, "partition.access",
                    "the access query returns \(answer.count) columns; it must return one: a partition key")
            }
        }
        return try typeName(oid: columns[0].oid, template: template, key: key, pg: pg)
    }

    /// The scope values, in their text form, sorted (numerically when all are integers); NULLs are skipped. For a
    /// partitioned template: the shared stream's (``PartitionLayout/sharedStream``), then the partition keys.
    package static func scopeValues(for template: Template, pg: PostgresConnection) throws -> [String] {
        let source: Template.Scope.Values
        if let sql = template.partitionValuesSQL {
            source = .query(sql)
        } else if let scope = template.scope {
            source = scope.values
        } else {
            return []
        }
        let key = template.partition == nil ? "scope.values" : "partition.values"
        var values: [String]
        switch source {
        case .list(let list):
            values = list
        case .query(let sql):
            do {
                values = Array(
                    Set(
                        try pg.query("SELECT v::text FROM (\(sql)) AS q(v) WHERE v IS NOT NULL").compactMap {
                            $0.first ?? nil
                        }))
            } catch let error as FerryError {
                throw fail(
                    template, key,
                    "the \(template.partition == nil ? "scope" : "partition") values query fails in PostgreSQL: \(error.message)"
                )
            }
        }
        if values.allSatisfy({ Int($0) != nil }) {
            values.sort { Int($0)! < Int($1)! }
        } else {
            values.sort()
        }
        // A partitioned dataset's first stream is the shared one.
        return template.partition == nil ? values : [PartitionLayout.sharedStream] + values
    }

    package static func checkSourceExists(
        _ table: Template.Table, index i: Int, template: Template, pg: PostgresConnection
    ) throws {
        let rows = try pg.query("SELECT to_regclass($1) IS NOT NULL", [SQLIdentifier.quoteQualified(table.source)])
        guard rows.first?.first == "t" else {
            throw fail(
                template, "tables[\(i)].source",
                "table '\(table.name)': PostgreSQL has no table '\(table.source)'; check the name (schema-qualify it as schema.table) and the database URL"
            )
        }
    }

    /// The source table's primary key columns, in key order.
    package static func sourcePrimaryKey(
        of table: Template.Table, index i: Int, template: Template, pg: PostgresConnection
    ) throws -> [String] {
        try checkSourceExists(table, index: i, template: template, pg: pg)
        let rows = try pg.query(
            """
            SELECT a.attname FROM pg_index i
            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
            WHERE i.indrelid = to_regclass($1) AND i.indisprimary
            ORDER BY array_position(i.indkey::int2[], a.attnum)
            """, [SQLIdentifier.quoteQualified(table.source)])
        let key = rows.compactMap { $0.first ?? nil }
        guard !key.isEmpty else {
            throw fail(
                template, "tables[\(i)].primaryKey",
                "table '\(table.name)': source '\(table.source)' has no primary key; name the key column(s) with `primaryKey: [id]`"
            )
        }
        return key
    }
}
