import FerryCore
import FerryPostgres
import Foundation

/// The SQL statements of a merge: each reads or writes one table's rows for many changes at once, through
/// `unnest` of the changes' key and value texts.
extension ChangeMerger {
    /// `unnest($1::text[], …) WITH ORDINALITY AS k(k1…, v1…, ord)` over the changes' key and value texts.
    /// `bases`: more text arrays, one per change each, named `b0…`.
    static func unnest(
        _ changes: [ValidChange], keys: Int, values: Int, firstParameter: Int, bases: [[String?]] = []
    ) -> (sql: String, parameters: [String]) {
        var parameters: [String] = []
        for c in 0..<keys { parameters.append(ChangeLog.arrayLiteral(changes.map { $0.keyParameters[c] })) }
        for c in 0..<values { parameters.append(ChangeLog.arrayLiteral(changes.map { $0.valueParameters[c] })) }
        for texts in bases { parameters.append(ChangeLog.arrayLiteral(texts)) }
        let arrays = parameters.indices.map { "$\(firstParameter + $0)::text[]" }.joined(separator: ", ")
        let names =
            (0..<keys).map { "k\($0)" } + (0..<values).map { "v\($0)" } + bases.indices.map { "b\($0)" } + ["ord"]
        return ("unnest(\(arrays)) WITH ORDINALITY AS k(\(names.joined(separator: ", ")))", parameters)
    }

    /// `t.id = k.k0::int AND …`
    static func keyMatch(_ schema: TableSchema, alias: String) -> String {
        schema.key.enumerated().map {
            "\(alias).\($0.element.quoted) = \(TableSchema.input($0.element, "k.k\($0.offset)"))"
        }
        .joined(separator: " AND ")
    }

    /// `t.id = ANY(ARRAY(SELECT (x)::integer FROM unnest($2::text[]) AS x)) AND …` over the key arrays that
    /// ``unnest(_:keys:values:firstParameter:)`` bound from `firstParameter` on: reaches the changes' rows through
    /// the primary-key index. Without it PostgreSQL joins a batch's few hundred keys to the table by hashing the
    /// whole table (a sequential scan per statement, measured at 24 ms against 0.6 ms for 500 keys in a table of
    /// 50,000 rows); an array behind a sub-select has no length the planner knows, so it takes the index.
    static func keyFilter(_ schema: TableSchema, alias: String, firstParameter: Int) -> String {
        let filters = schema.key.enumerated().compactMap { offset, column -> String? in
            // An array-typed key cannot be rebuilt element-wise into ARRAY(...); the join alone finds those rows.
            guard column.sourceKind != .array else { return nil }
            return
                "\(alias).\(column.quoted) = ANY(ARRAY(SELECT \(TableSchema.input(column, "x")) FROM unnest($\(firstParameter + offset)::text[]) AS x))"
        }
        return filters.isEmpty ? "TRUE" : filters.joined(separator: " AND ")
    }

    /// Reads and locks (`FOR UPDATE`) the rows the changes name, in key order: each row's `updated_at` in
    /// milliseconds, nil where there is no row. The rows themselves are read only for the answers that need them
    /// (``rows(_:schema:on:)``): most changes are applied, and their answer is the row as written.
    ///
    /// With `comparing` (a table merged per column), the same statement also says, per change and per such column,
    /// whether the row's value still equals the change's base for it (compared as the column type's text; nil
    /// where the change has no base for the column).
    static func lockRows(
        _ changes: [ValidChange], schema: TableSchema, comparing: [TableSchema.Column] = [], on pg: PostgresConnection
    ) throws -> (updated: [Int64?], unchanged: [[Bool]?]) {
        let bases = comparing.map { column in
            changes.map { change -> String? in
                guard let i = change.columns.firstIndex(where: { $0.name == column.name }) else { return nil }
                return change.bases?[i]?.text
            }
        }
        let (from, parameters) = unnest(
            changes, keys: schema.key.count, values: 0, firstParameter: 1, bases: bases)
        let order = schema.key.map { "t.\($0.quoted)" }.joined(separator: ", ")
        let same = comparing.enumerated().map { i, column in
            ", ((t.\(column.quoted))::text IS NOT DISTINCT FROM (\(TableSchema.input(column, "k.b\(i)")))::text)::int::text"
        }
        let rows = try pg.runPrepared(
            """
            SELECT k.ord::text, \(schema.updatedMillis(from: "t"))\(same.joined())
            FROM \(schema.sqlName) AS t JOIN \(from) ON \(keyMatch(schema, alias: "t"))
            WHERE \(keyFilter(schema, alias: "t", firstParameter: 1))
            ORDER BY \(order) FOR UPDATE OF t
            """, parameters)
        var out = [Int64?](repeating: nil, count: changes.count)
        var unchanged = [[Bool]?](repeating: nil, count: changes.count)
        for row in rows {
            guard let ord = row[0].flatMap({ Int($0) }), let millis = row[1].flatMap({ Int64($0) }) else { continue }
            out[ord - 1] = millis
            if !comparing.isEmpty { unchanged[ord - 1] = comparing.indices.map { row[2 + $0] == "1" } }
        }
        return (out, unchanged)
    }

    /// The current rows the changes name, by index into `changes` (rows this transaction has locked).
    static func rows(_ changes: [ValidChange], schema: TableSchema, on pg: PostgresConnection) throws -> [Int: [String:
        JSONValue]]
    {
        let (from, parameters) = unnest(changes, keys: schema.key.count, values: 0, firstParameter: 1)
        let rows = try pg.runPrepared(
            """
            SELECT k.ord::text, \(schema.outputs(from: "t"))
            FROM \(schema.sqlName) AS t JOIN \(from) ON \(keyMatch(schema, alias: "t"))
            WHERE \(keyFilter(schema, alias: "t", firstParameter: 1))
            """, parameters)
        var out: [Int: [String: JSONValue]] = [:]
        for row in rows {
            guard let ord = row[0].flatMap({ Int($0) }) else { continue }
            out[ord - 1] = schema.row(row, at: 1)
        }
        return out
    }

    /// Which of `changes` name a row that `rows` (a table's visible-rows SELECT for the transaction's scope)
    /// contains, as indexes into `changes`.
    static func visibleChanges(_ changes: [ValidChange], rows: String, schema: TableSchema, on pg: PostgresConnection)
        throws -> [Int]
    {
        guard !changes.isEmpty else { return [] }
        let (from, parameters) = unnest(changes, keys: schema.key.count, values: 0, firstParameter: 1)
        let found = try pg.runPrepared(
            """
            SELECT k.ord::text FROM \(from)
            WHERE EXISTS (SELECT 1 FROM (\(rows)) AS v WHERE \(keyMatch(schema, alias: "v")))
            """, parameters)
        return found.compactMap { $0[0].flatMap { Int($0) }.map { $0 - 1 } }
    }

    /// Which of `changes` name a tombstoned key (indexes into `changes`).
    static func tombstones(
        _ changes: [ValidChange], schema: TableSchema, context: BatchContext, on pg: PostgresConnection
    ) throws -> [Int] {
        guard !changes.isEmpty else { return [] }
        let (from, parameters) = unnest(changes, keys: schema.key.count, values: 0, firstParameter: 3)
        let key = schema.keyObject { column in
            TableSchema.input(column, "k.k\(schema.key.firstIndex { $0.name == column.name }!)")
        }
        let rows = try pg.runPrepared(
            """
            SELECT k.ord::text FROM \(from)
            WHERE EXISTS (SELECT 1 FROM ferry_tombstones f WHERE f.dataset = $1 AND f.tbl = $2 AND f.key = \(key))
            """, [context.dataset, schema.name] + parameters)
        return rows.compactMap { $0[0].flatMap { Int($0) }.map { $0 - 1 } }
    }

    /// Writes the changes' values over existing rows (one shape), stamping `updated_at`; returns the new rows.
    static func update(_ changes: [ValidChange], schema: TableSchema, context: BatchContext, on pg: PostgresConnection)
        throws -> [Int: [String: JSONValue]]
    {
        let statement = updateStatement(changes, schema: schema, context: context)
        let rows = try pg.runPrepared(statement.sql, statement.parameters)
        return try byOrdinal(rows, schema: schema, expected: changes.count, what: "update")
    }

    /// The statement of ``update(_:schema:context:on:)``. With `condition` it writes, and returns, only the rows
    /// that meet it (``updatesWithoutConflict(_:schema:context:on:)``).
    static func updateStatement(
        _ changes: [ValidChange], schema: TableSchema, context: BatchContext, condition: NoConflict? = nil
    ) -> PostgresConnection.PipelinedStatement {
        let columns = changes[0].columns
        let additive = changes[0].additive
        let (from, parameters) = unnest(
            changes, keys: schema.key.count, values: columns.count, firstParameter: 2, bases: condition?.arrays ?? [])
        var sets = columns.enumerated().map { i, column in
            let value = TableSchema.input(column, "k.v\(i)")
            // An additive column's parameter is the device's difference: added to the value the row has now.
            if !additive.isEmpty && additive[i] {
                return "\(column.quoted) = coalesce(t.\(column.quoted), 0) + \(value)"
            }
            return "\(column.quoted) = \(value)"
        }
        if let updated = schema.updated {
            var stamp = TableSchema.input(updated, "$1")
            // A table merged per column or with additive columns: every write of a row stamps it later than the one
            // before, even when a batch that read the clock earlier commits later. A device keeps an answer until a
            // version stamped later carries its row (Outbox.keepAnsweredRows), so the last write must carry the
            // latest stamp, or a device would keep an intermediate count.
            if !schema.table.columnMerge.isRowLevel {
                stamp =
                    "GREATEST(\(stamp), t.\(updated.quoted) + interval '1 millisecond')"
            }
            sets.append("\(updated.quoted) = \(stamp)")
        }
        return .init(
            """
            UPDATE \(schema.sqlName) AS t SET \(sets.joined(separator: ", "))
            FROM \(from) WHERE \(keyMatch(schema, alias: "t")) AND \(keyFilter(schema, alias: "t", firstParameter: 2))\(condition.map { " AND \($0.sql)" } ?? "")
            RETURNING k.ord::text, \(schema.outputs(from: "t"))
            """, [context.nowText] + parameters)
    }

    /// Creates rows (one shape), stamping `created_at` and `updated_at`; returns the new rows.
    static func insert(_ changes: [ValidChange], schema: TableSchema, context: BatchContext, on pg: PostgresConnection)
        throws -> [Int: [String: JSONValue]]
    {
        let columns = changes[0].columns
        let (from, parameters) = unnest(changes, keys: schema.key.count, values: columns.count, firstParameter: 2)
        var targets = schema.key.map(\.quoted) + columns.map(\.quoted)
        var values =
            schema.key.enumerated().map { TableSchema.input($0.element, "k.k\($0.offset)") }
            + columns.enumerated().map { TableSchema.input($0.element, "k.v\($0.offset)") }
        for stamp in [schema.created, schema.updated].compactMap({ $0 }) {
            targets.append(stamp.quoted)
            values.append(TableSchema.input(stamp, "$1"))
        }
        let returnedKeys = schema.key.enumerated().map { "t.\($0.element.quoted) AS ferry_k\($0.offset)" }
        let outputs = schema.columns.enumerated().map {
            "\(TableSchema.output($0.element, from: "t")) AS ferry_o\($0.offset)"
        }
        let join = schema.key.enumerated().map {
            "ins.ferry_k\($0.offset) = \(TableSchema.input($0.element, "k.k\($0.offset)"))"
        }
        let rows = try pg.runPrepared(
            """
            WITH ins AS (
              INSERT INTO \(schema.sqlName) AS t (\(targets.joined(separator: ", ")))
              SELECT \(values.joined(separator: ", ")) FROM \(from)
              RETURNING \((returnedKeys + outputs).joined(separator: ", ")))
            SELECT k.ord::text, \(schema.columns.indices.map { "ins.ferry_o\($0)" }.joined(separator: ", "))
            FROM ins JOIN \(from) ON \(join.joined(separator: " AND "))
            """, [context.nowText] + parameters)
        return try byOrdinal(rows, schema: schema, expected: changes.count, what: "insert")
    }

    /// Deletes rows and writes their tombstones in one statement.
    static func delete(_ changes: [ValidChange], schema: TableSchema, context: BatchContext, on pg: PostgresConnection)
        throws
    {
        let (from, parameters) = unnest(changes, keys: schema.key.count, values: 0, firstParameter: 4)
        let key = schema.keyObject { "t.\($0.quoted)" }
        let rows = try pg.runPrepared(
            """
            WITH d AS (
              DELETE FROM \(schema.sqlName) AS t USING \(from)
              WHERE \(keyMatch(schema, alias: "t")) AND \(keyFilter(schema, alias: "t", firstParameter: 4)) RETURNING \(key) AS key)
            INSERT INTO ferry_tombstones(dataset, tbl, key, deleted_at) SELECT $1, $2, d.key, $3::timestamptz FROM d
            ON CONFLICT (dataset, tbl, key) DO UPDATE SET deleted_at = EXCLUDED.deleted_at
            RETURNING 1
            """, [context.dataset, schema.name, context.nowText] + parameters)
        guard rows.count == changes.count else {
            throw MergeInvariantError(table: schema.name, "deleted \(rows.count) rows, expected \(changes.count)")
        }
    }

    /// The rows a write returned, by index into its changes; with `expected`, exactly that many.
    static func byOrdinal(_ rows: [[String?]], schema: TableSchema, expected: Int?, what: String) throws -> [Int:
        [String: JSONValue]]
    {
        if let expected, rows.count != expected {
            throw MergeInvariantError(table: schema.name, "\(what) wrote \(rows.count) rows, expected \(expected)")
        }
        var out: [Int: [String: JSONValue]] = [:]
        for row in rows {
            guard let ord = row[0].flatMap({ Int($0) }) else { continue }
            out[ord - 1] = schema.row(row, at: 1)
        }
        return out
    }
}
