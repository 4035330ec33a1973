import FerryCore
import FerryPostgres
import Foundation

/// What PostgreSQL says about one row for ``RowExplainer``, read in one read-only transaction (it never writes):
/// whether the row exists, whether the template exports it to the device's scope (and which rule leaves it out),
/// its `updated_at`, its tombstone, and the device's uploaded changes for it with their stored answers.
///
/// Every identifier goes through ``SQLIdentifier``, every value is a bound parameter (the key parts are bound
/// untyped, so PostgreSQL reads them as the key columns' types and uses their index: one index lookup per query on a
/// dataset of any size). The device's changes are found in `ferry_changes` by its id and the key columns of the
/// answer's `row` (an answer stores no table name: `gone`, `invalid` and `forbidden` answers, which carry no row,
/// are not found).
struct RowFacts: Sendable {
    var present = false
    var inScope = false
    var rule: String?
    /// `updated_at` of the row (UTC, milliseconds).
    var updatedAt: String?
    /// When a device's delete of it was merged (its tombstone).
    var deletedAt: String?
    var changes: [RowExplanation.Change] = []
    /// For a partitioned dataset: the partition key of a present row (nil for a shared table's row).
    var partition: String?

    /// Reads the facts of `reference` for a device of `dataset` in `scope` (nil: an unscoped dataset, or a scope
    /// not known yet). `template` has its primary keys resolved.
    static func read(
        _ reference: RowReference, template: Template, dataset: String, device: String, scope: String?,
        on pg: PostgresConnection
    ) throws -> RowFacts {
        guard let index = template.tables.firstIndex(where: { $0.name == reference.table }) else {
            let tables = template.tables.map(\.name).joined(separator: ", ")
            throw FerryError(
                .badInput, "dataset '\(dataset)' has no table '\(reference.table)'; its tables: \(tables)", key: "row")
        }
        let table = template.tables[index]
        let key = table.primaryKey ?? []
        guard key.count == reference.key.count else {
            throw FerryError(
                .badInput,
                "table '\(table.name)' has a \(key.count)-column primary key (\(key.joined(separator: ", "))); write --row \(table.name):\(key.map { $0.uppercased() }.joined(separator: ","))",
                key: "row")
        }
        try pg.execute("BEGIN READ ONLY")
        // A read-only transaction: a failed ROLLBACK loses nothing (the connection is reset on error).
        defer { _ = try? pg.execute("ROLLBACK") }
        try pg.execute("SET LOCAL statement_timeout = '10s'")
        let scoped = template.scope != nil
        var expression: String?
        if scoped, let scope {
            expression = try template.scopeTypeName(using: pg).map(template.scopeExpression(typeName:))
            _ = try pg.run(ScopeSQL.setScopeSQL, [scope])
        }
        func bind(_ sql: String) -> String { expression.map { ScopeSQL.substitute(sql, with: $0) } ?? sql }
        let canBind = !scoped || expression != nil
        let keyColumns = key.map(table.sourceColumn(of:))
        func match(_ alias: String, from first: Int = 1) -> String {
            keyColumns.enumerated().map { "\(alias).\(SQLIdentifier.quote($0.element)) = $\($0.offset + first)" }
                .joined(separator: " AND ")
        }
        var facts = RowFacts()
        let source: String? =
            table.query.map { query in
                ScopeSQL.usesScope(query) && !canBind ? nil : "(\(bind(query)))"
            } ?? SQLIdentifier.quoteQualified(table.source)
        let updated = SQLIdentifier.literal(table.sourceColumn(of: template.timestamps.updated))
        if let source {
            let rows = try pg.run(
                "SELECT \(FleetTable.utc("(to_jsonb(ferry_r)->>\(updated))::timestamptz")) FROM \(source) AS ferry_r WHERE \(match("ferry_r")) LIMIT 1",
                reference.key)
            facts.present = !rows.isEmpty
            facts.updatedAt = rows.first?.first ?? nil
        }
        if facts.present, template.partition != nil {
            facts.partition = try partitionKey(of: reference, tableAt: index, template: template, pg)
            facts.inScope = true
        } else if facts.present {
            if !canBind {
                facts.rule = "the device's scope is not known yet (it has sent no valid token)"
            } else {
                let rowsSQL = template.rowsSQL(tableAt: index, scopeExpression: expression)
                facts.inScope =
                    !(try pg.run(
                        "SELECT 1 FROM (\(rowsSQL)) AS ferry_s WHERE \(match("ferry_s")) LIMIT 1", reference.key))
                    .isEmpty
                if !facts.inScope, let source {
                    facts.rule = try rule(
                        table: table, source: source, bind: bind, match: match("ferry_t0"), reference, pg)
                }
            }
        } else {
            facts.deletedAt = try tombstone(reference, table: table, keyColumns: keyColumns, dataset: dataset, pg)
        }
        facts.changes = try changes(reference, key: key, dataset: dataset, device: device, pg)
        return facts
    }

    /// The rule that leaves a present row out: the table's filter when it is false for the row, else its parent.
    static func rule(
        table: Template.Table, source: String, bind: (String) -> String, match: String, _ reference: RowReference,
        _ pg: PostgresConnection
    ) throws -> String {
        if let filter = table.filter {
            let passes =
                try pg.run(
                    "SELECT coalesce((\(bind(filter))), false)::text FROM \(source) AS ferry_t0 WHERE \(match)",
                    reference.key
                ).first?.first ?? nil
            if passes != "true" { return "filter `\(filter)`" }
        }
        if let parent = table.parent {
            return "parent: its \(parent.table) row (\(parent.column)) is not exported"
        }
        return "the table's query"
    }

    /// The partition key of present row `reference` of table `index` in a partitioned template: its partition column,
    /// or its parent's key followed up the chain (one index lookup per level); nil for a shared table.
    static func partitionKey(
        of reference: RowReference, tableAt index: Int, template: Template, _ pg: PostgresConnection
    ) throws -> String? {
        var (current, columns, values) = (
            index, (template.tables[index].primaryKey ?? []).map(template.tables[index].sourceColumn(of:)),
            reference.key
        )
        for _ in template.tables.indices {
            let table = template.tables[current]
            let column: String
            switch template.placement(ofTableAt: current) {
            case .shared: return nil
            case .column(let name): column = name
            case .parent: column = table.parent!.column
            }
            let source = table.query.map { "(\($0))" } ?? SQLIdentifier.quoteQualified(table.source)
            let match = columns.enumerated().map { "ferry_r.\(SQLIdentifier.quote($0.element)) = $\($0.offset + 1)" }
                .joined(separator: " AND ")
            guard
                let value = try pg.run(
                    "SELECT ferry_r.\(SQLIdentifier.quote(column))::text FROM \(source) AS ferry_r WHERE \(match) LIMIT 1",
                    values
                ).first?.first ?? nil
            else { return nil }
            guard case .parent = template.placement(ofTableAt: current), let parent = table.parent,
                let next = template.tables.firstIndex(where: { $0.name == parent.table })
            else { return value }
            (current, columns, values) = (
                next, (template.tables[next].primaryKey ?? []).prefix(1).map(template.tables[next].sourceColumn(of:)),
                [value]
            )
        }
        return nil
    }

    /// The time of the row's tombstone (a device deleted it), UTC.
    static func tombstone(
        _ reference: RowReference, table: Template.Table, keyColumns: [String], dataset: String,
        _ pg: PostgresConnection
    ) throws -> String? {
        let match = keyColumns.enumerated().map { "key->>\(SQLIdentifier.literal($0.element)) = $\($0.offset + 4)" }
            .joined(separator: " AND ")
        return try pg.run(
            "SELECT \(FleetTable.utc("deleted_at")) FROM ferry_tombstones WHERE dataset = $1 AND tbl IN ($2, $3) AND \(match)",
            [dataset, table.name, table.source] + reference.key
        ).first?.first ?? nil
    }

    /// The device's changes of the row with their stored answers, oldest first.
    static func changes(
        _ reference: RowReference, key: [String], dataset: String, device: String, _ pg: PostgresConnection
    ) throws -> [RowExplanation.Change] {
        let match = key.enumerated().map {
            "(result::jsonb->'row'->>\(SQLIdentifier.literal($0.element))) = $\($0.offset + 3)"
        }.joined(separator: " AND ")
        let rows = try pg.run(
            """
            SELECT id, result::text, \(FleetTable.utc("processed_at")) FROM ferry_changes
            WHERE dataset = $1 AND client_id = $2 AND \(match) ORDER BY processed_at, id
            """, [dataset, device] + reference.key)
        let decoder = JSONDecoder()
        return try rows.compactMap { row in
            guard let id = row[0], let text = row[1], let at = row[2] else { return nil }
            let answer = try decoder.decode(ChangeResult.self, from: Data(text.utf8))
            return RowExplanation.Change(
                id: id, status: answer.status.rawValue, lost: answer.lost, message: answer.message, at: at)
        }
    }
}
