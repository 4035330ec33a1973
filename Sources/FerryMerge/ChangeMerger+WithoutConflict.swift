import FerryCore
import FerryPostgres

/// Updates written without reading their rows first: the merge rule's decision, for the case where it writes the
/// whole change, is a condition PostgreSQL checks on each row as the UPDATE locks it. Most changes a device sends
/// meet it (nobody else touched the row), so a batch of them costs one statement per shape instead of a locking
/// read, a decision in Swift and then the write.
extension ChangeMerger {
    /// Writes at once the updates the table's rule would write whole as it finds their rows, without reading the
    /// rows first: returns the written rows, by index into `changes`. The others (a conflict the rule settles
    /// against the change, even for one column; a row gone; an insert or delete) are left for the locking read
    /// and the decision in Swift (``decideAndWrite(_:of:context:on:)``).
    ///
    /// PostgreSQL checks the condition (``NoConflict``) on the row it locks; a row another transaction is writing
    /// is waited for and checked again in its new version. Not on a scoped dataset, whose scope is checked before a
    /// write.
    static func updatesWithoutConflict(
        _ changes: [ValidChange], schema: TableSchema, context: BatchContext, on pg: PostgresConnection
    ) throws -> [Int: [String: JSONValue]] {
        var written: [Int: [String: JSONValue]] = [:]
        for (group, statement) in updatesWithoutConflictStatements(changes, schema: schema, context: context) {
            let rows = try byOrdinal(
                try pg.runPrepared(statement.sql, statement.parameters), schema: schema, expected: nil,
                what: "update")
            for (k, row) in rows { written[group[k]] = row }
        }
        return written
    }

    /// The statements of ``updatesWithoutConflict(_:schema:context:on:)``, one per shape, each with the indexes
    /// into `changes` it writes (its rows come back by index into that group).
    ///
    /// Each statement locks its rows as it joins them, in the order of its changes: they go in key order
    /// (``ValidChange/keyPrecedes(_:)``), and the statements in the order of their shapes, so that two batches
    /// writing the same rows wait for each other instead of deadlocking (a deadlock costs PostgreSQL's
    /// `deadlock_timeout`, then the batch is redone change by change). Two batches that write the same rows with
    /// different sets of columns can still cross; PostgreSQL then fails one of them.
    static func updatesWithoutConflictStatements(_ changes: [ValidChange], schema: TableSchema, context: BatchContext)
        -> [(group: [Int], statement: PostgresConnection.PipelinedStatement)]
    {
        guard context.visibility[schema.name] == nil, schema.updated != nil else { return [] }
        let updates = changes.indices.filter { changes[$0].op == .update }
        let groups = grouped(updates, changes).sorted { changes[$0[0]].shape < changes[$1[0]].shape }
        return groups.map { unordered in
            let group = inKeyOrder(unordered, changes, schema: schema)
            let shape = group.map { changes[$0] }
            return (
                group,
                updateStatement(shape, schema: schema, context: context, condition: NoConflict(shape, schema: schema))
            )
        }
    }

    /// `indexes` into `changes` sorted by ``ValidChange/keyPrecedes(_:)``; a key of one integer column (the usual
    /// one) is parsed once per change rather than at every comparison.
    static func inKeyOrder(_ indexes: [Int], _ changes: [ValidChange], schema: TableSchema) -> [Int] {
        guard schema.key.count == 1, schema.key[0].sourceKind == .integer else {
            return indexes.sorted { changes[$0].keyPrecedes(changes[$1]) }
        }
        let values = indexes.map { Int64(changes[$0].keyParameters[0] ?? "") ?? .min }
        return values.indices.sorted { values[$0] < values[$1] }.map { indexes[$0] }
    }

    /// The SQL condition under which the table's rule writes every column of an update (one shape) as it finds the
    /// row `t`: the `update` answers of ``MergeDecision/decide(op:rule:row:tombstoned:baseMillis:editedMillis:)``
    /// and ``MergeDecision/decideColumns(rule:perColumn:row:unchanged:additive:baseMillis:editedMillis:)``, in SQL.
    /// It may be stricter than the rule (a NULL anywhere fails it: that change is decided in Swift), never laxer.
    ///
    /// - the row exists with an `updated_at` (the locking read finds no row otherwise);
    /// - and the device wins a conflict (`client-wins`; `newest-wins` with `editedAt` after `updated_at`), or no
    ///   column conflicts: an additive column never does; on a table merged per column, a column with a base
    ///   conflicts when the row's value differs from it; any other column when `updated_at` is not the change's
    ///   `baseUpdatedAt`.
    struct NoConflict {
        /// The text arrays the condition reads, bound after the change's keys and values as `k.b0…`: the base and
        /// edit times in milliseconds, then per column of the shape compared with its base: that base, and whether
        /// the change has one when some change of the shape has none.
        let arrays: [[String?]]
        let sql: String

        init(_ changes: [ValidChange], schema: TableSchema) {
            var arrays = [changes.map { $0.baseMillis.map(String.init) }, changes.map { String($0.editedMillis) }]
            let millis = TableSchema.millis(of: schema.updated!, from: "t")
            let unchanged = "\(millis) = (k.b0)::int8"
            var columns: [String] = []
            let first = changes[0]
            for (i, column) in first.columns.enumerated() where first.additive.isEmpty || !first.additive[i] {
                guard schema.table.columnMerge.perColumn, changes.contains(where: { $0.bases?[i] != nil }) else {
                    columns.append(unchanged)
                    continue
                }
                let same =
                    "(t.\(column.quoted))::text IS NOT DISTINCT FROM (\(TableSchema.input(column, "k.b\(arrays.count)")))::text"
                arrays.append(changes.map { $0.bases?[i]?.text })
                // Usually every change of the shape has a base for the column; otherwise a flag says which do.
                guard changes.contains(where: { $0.bases?[i] == nil }) else {
                    columns.append(same)
                    continue
                }
                arrays.append(changes.map { $0.bases?[i] == nil ? "0" : "1" })
                columns.append("CASE WHEN k.b\(arrays.count - 1) = '1' THEN \(same) ELSE \(unchanged) END")
            }
            let deviceWins: String
            switch schema.table.merge {
            case .clientWins: deviceWins = "TRUE"
            case .serverWins: deviceWins = "FALSE"
            case .newestWins: deviceWins = "(k.b1)::int8 > \(millis)"
            }
            let noColumnConflicts = Set(columns).count == 1 ? columns[0] : columns.joined(separator: " AND ")
            self.arrays = arrays
            self.sql =
                "\(millis) IS NOT NULL AND (\(deviceWins) OR \(columns.isEmpty ? "TRUE" : "(\(noColumnConflicts))"))"
        }
    }
}
