import FerryCore
import FerryPostgres

extension TemplateValidator {
    /// A query's output column: its name and type OID.
    typealias DescribedColumn = (name: String, oid: UInt32)

    /// Resolves every table, in template order. Run it inside the export transaction so it sees the same snapshot.
    /// `scopeExpression` is what `:scope` stands for (``ScopeSQL/expression(typeName:)``), nil without `scope:`.
    static func plans(for unresolved: Template, pg: PostgresConnection, scopeExpression: String? = nil) throws
        -> [TablePlan]
    {
        let needsParentKeys = unresolved.tables.contains { $0.parent != nil }
        let template = needsParentKeys ? try unresolved.resolvingPrimaryKeys(using: pg) : unresolved
        let described = try template.tables.indices.map { i in
            try describeTable(at: i, of: template, pg: pg, scopeExpression: scopeExpression)
        }
        let types = try typeInfo(oids: Set(described.flatMap { $0.map(\.oid) }), pg: pg)
        return try described.enumerated().map { i, columns in
            try plan(
                tableAt: i, columns: columns, template: template, types: types, pg: pg,
                scopeExpression: scopeExpression)
        }
    }

    /// The output columns of table `i`'s query, after checking that its source exists, that its parent link
    /// names a column and a single-column key, and that its filter and parent link run in PostgreSQL.
    static func describeTable(
        at i: Int, of template: Template, pg: PostgresConnection, scopeExpression: String?
    ) throws -> [DescribedColumn] {
        let table = template.tables[i]
        try checkSourceExists(table, index: i, template: template, pg: pg)
        let query = table.query ?? "SELECT * FROM \(SQLIdentifier.quoteQualified(table.source))"
        let columns: [DescribedColumn]
        do {
            columns = try pg.describe("SELECT * FROM (\(query)) AS q")
        } catch let error as FerryError {
            throw fail(
                template, "tables[\(i)].query",
                "table '\(table.name)': the query fails in PostgreSQL: \(error.message); fix the query (it must be one SELECT)"
            )
        }
        if let column = table.partition, !columns.contains(where: { $0.name == column }) {
            throw fail(
                template, "tables[\(i)].partition",
                "table '\(table.name)' has no column '\(column)' to hold its partition key; columns are: \(columns.map(\.name).joined(separator: ", "))"
            )
        }
        if let parent = table.parent {
            guard columns.contains(where: { $0.name == parent.column }) else {
                throw fail(
                    template, "tables[\(i)].parent.column",
                    "table '\(table.name)' has no column '\(parent.column)' to link to its parent; columns are: \(columns.map(\.name).joined(separator: ", "))"
                )
            }
            let parentKey = template.table(named: parent.table)?.primaryKey ?? []
            guard parentKey.count == 1 else {
                throw fail(
                    template, "tables[\(i)].parent.table",
                    "table '\(table.name)': parent '\(parent.table)' has a \(parentKey.count)-column primary key; a parent needs a single-column key that `\(parent.column)` holds"
                )
            }
        }
        if table.filter != nil || table.parent != nil || table.partition != nil {
            let key =
                table.filter != nil
                ? "tables[\(i)].filter" : table.parent != nil ? "tables[\(i)].parent" : "tables[\(i)].partition"
            do {
                _ = try pg.describe(
                    "SELECT * FROM (\(template.rowsSQL(tableAt: i, scopeExpression: scopeExpression))) AS q")
            } catch let error as FerryError {
                throw fail(
                    template, key,
                    "table '\(table.name)': the \(table.filter != nil ? "filter" : table.parent != nil ? "parent link" : "partition column") fails in PostgreSQL: \(error.message); \(table.filter != nil ? "the filter must be a boolean over the source's columns, e.g. `tier <= :scope`" : "check the column and the partition key's type")"
                )
            }
        }
        return columns
    }

    /// The plan of table `i` from its query's output `columns`: the exported columns with their types, the key
    /// and the stamps, each checked against the template's `exclude:`, `rename:`, `primaryKey` and `timestamps:`.
    static func plan(
        tableAt i: Int, columns: [DescribedColumn], template: Template,
        types: [UInt32: (name: String, oid: UInt32, typtype: String, category: String)], pg: PostgresConnection,
        scopeExpression: String?
    ) throws -> TablePlan {
        let table = template.tables[i]
        let kept = try keptColumns(tableAt: i, columns: columns, template: template)
        let keptNames = kept.map { table.sqliteColumn(of: $0.name) }
        let primaryKey = try primaryKey(tableAt: i, keptSources: kept.map(\.name), template: template, pg: pg)
        let created = keptNames.contains(template.timestamps.created) ? template.timestamps.created : nil
        let updated = keptNames.contains(template.timestamps.updated) ? template.timestamps.updated : nil
        if table.writable && table.merge == .newestWins && updated == nil {
            throw fail(
                template, "timestamps.updated",
                "table '\(table.name)' is writable with merge newest-wins but has no '\(template.timestamps.updated)' column to compare; add the column to the table/query, set `timestamps: {updated: …}`, or choose another merge rule"
            )
        }
        for column in table.attachments.keys.sorted() where !keptNames.contains(column) {
            throw fail(
                template, "tables[\(i)].attachments.\(column)",
                "table '\(table.name)': attachment column '\(column)' is not one of its exported columns (\(keptNames.joined(separator: ", "))); name an exported column that holds the SHA-256"
            )
        }
        let plansForColumns = kept.map { column -> ColumnPlan in
            let info =
                types[column.oid] ?? (name: "oid \(column.oid)", oid: column.oid, typtype: "b", category: "U")
            return ColumnPlan(
                name: table.sqliteColumn(of: column.name), sourceName: column.name, typeOID: info.oid,
                typeName: info.name,
                kind: ColumnPlan.kind(oid: info.oid, typtype: info.typtype, category: info.category))
        }
        return TablePlan(
            index: i, table: table, columns: plansForColumns, primaryKey: primaryKey, createdColumn: created,
            updatedColumn: updated,
            rowsQuery: template.rowsSQL(tableAt: i, scopeExpression: scopeExpression))
    }

    /// The columns of table `i` that are exported (all but `exclude:`), checked for distinct, quotable names and
    /// for a `rename:` that names one of them and clashes with none.
    static func keptColumns(tableAt i: Int, columns: [DescribedColumn], template: Template) throws
        -> [DescribedColumn]
    {
        let table = template.tables[i]
        let at = "tables[\(i)]"
        var seen: Set<String> = []
        for column in columns where !seen.insert(column.name).inserted {
            throw fail(
                template, "\(at).query",
                "table '\(table.name)': the query returns column '\(column.name)' twice; give each column a distinct name with AS"
            )
        }
        let names = columns.map(\.name)
        for (j, excluded) in table.exclude.enumerated() where !names.contains(excluded) {
            throw fail(
                template, "\(at).exclude[\(j)]",
                "table '\(table.name)' has no column '\(excluded)' to exclude; columns are: \(names.joined(separator: ", "))"
            )
        }
        let kept = columns.filter { !table.exclude.contains($0.name) }
        guard !kept.isEmpty else {
            throw fail(
                template, "\(at).exclude",
                "table '\(table.name)': every column is excluded; export at least the key")
        }
        for column in kept where !SQLIdentifier.isQuotable(column.name) {
            throw fail(
                template, "\(at).query",
                "table '\(table.name)': column name '\(column.name)' cannot be used; rename it with AS")
        }
        let keptSources = kept.map(\.name)
        for (sqliteName, source) in table.rename.sorted(by: { $0.key < $1.key }) where !keptSources.contains(source) {
            throw fail(
                template, "\(at).rename.\(sqliteName)",
                "table '\(table.name)': there is no PostgreSQL column '\(source)' to show as '\(sqliteName)'; columns are: \(keptSources.joined(separator: ", "))"
            )
        }
        let keptNames = keptSources.map(table.sqliteColumn(of:))
        for (sqliteName, source) in table.rename.sorted(by: { $0.key < $1.key })
        where keptNames.filter({ $0 == sqliteName }).count > 1 {
            throw fail(
                template, "\(at).rename.\(sqliteName)",
                "table '\(table.name)': '\(source)' renamed to '\(sqliteName)' clashes with the exported column '\(sqliteName)'; rename or exclude that one too"
            )
        }
        return kept
    }

    /// Table `i`'s key in SQLite names: the template's `primaryKey`, or the source's shown through `rename:`;
    /// every key column must be exported (`keptSources`, PostgreSQL names).
    static func primaryKey(tableAt i: Int, keptSources: [String], template: Template, pg: PostgresConnection) throws
        -> [String]
    {
        let table = template.tables[i]
        let at = "tables[\(i)]"
        let primaryKey: [String]
        if let given = table.primaryKey {
            primaryKey = given
        } else {
            let sourceKey = try sourcePrimaryKey(of: table, index: i, template: template, pg: pg)
            for key in sourceKey where !keptSources.contains(key) {
                let why =
                    table.exclude.contains(key)
                    ? "is excluded" : "is not among the exported columns (\(keptSources.joined(separator: ", ")))"
                throw fail(
                    template, "\(at).primaryKey",
                    "table '\(table.name)': key column '\(key)' \(why); export it or set primaryKey")
            }
            primaryKey = sourceKey.map(table.sqliteColumn(of:))
        }
        let keptNames = keptSources.map(table.sqliteColumn(of:))
        for (j, key) in primaryKey.enumerated() where !keptNames.contains(key) {
            let source = table.sourceColumn(of: key)
            let why =
                table.exclude.contains(source)
                ? "is excluded"
                : table.rename[key] == nil && table.rename.values.contains(key)
                    ? "is renamed to '\(table.sqliteColumn(of: key))' by `rename:` (primaryKey names SQLite columns)"
                    : "is not among the exported columns (\(keptNames.joined(separator: ", ")))"
            throw fail(
                template, "\(at).primaryKey\(table.primaryKey == nil ? "" : "[\(j)]")",
                "table '\(table.name)': key column '\(key)' \(why); export it or set primaryKey")
        }
        return primaryKey
    }

    /// Type name, base OID (for domains), typtype and category of each OID.
    static func typeInfo(oids: Set<UInt32>, pg: PostgresConnection) throws -> [UInt32: (
        name: String, oid: UInt32, typtype: String, category: String
    )] {
        guard !oids.isEmpty else { return [:] }
        let list = "{" + oids.map(String.init).joined(separator: ",") + "}"
        let rows = try pg.query(
            """
            SELECT t.oid::int8, coalesce(b.oid, t.oid)::int8, coalesce(b.typname, t.typname)::text,
                   coalesce(b.typtype, t.typtype)::text, coalesce(b.typcategory, t.typcategory)::text
            FROM pg_type t LEFT JOIN pg_type b ON t.typtype = 'd' AND b.oid = t.typbasetype
            WHERE t.oid = ANY($1::oid[])
            """, [list])
        var out: [UInt32: (name: String, oid: UInt32, typtype: String, category: String)] = [:]
        for row in rows {
            guard let oid = row[0].flatMap({ UInt32($0) }), let base = row[1].flatMap({ UInt32($0) }) else { continue }
            out[oid] = (row[2] ?? "", base, row[3] ?? "", row[4] ?? "")
        }
        return out
    }
}
