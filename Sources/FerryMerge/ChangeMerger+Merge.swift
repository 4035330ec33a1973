import FerryCore
import FerryPostgres
import Foundation

/// The SQL side of a batch. Fast path: the whole batch in one transaction, in two round trips when every change
/// is an update the rule applies as it finds the row: `BEGIN` with those updates (one statement per table and
/// shape), then the answers' INSERT into `ferry_changes` with `COMMIT`. Only changes those updates left out (a
/// conflict, a row gone, an insert or delete, an update with bases) cost more: a locking read per table, the
/// decision in Swift, a write per table and shape. Every statement is prepared once per connection.
///
/// Exactly once rests on `ferry_changes`' primary key, not on a read ahead of the writes: a change answered before
/// makes the answers' INSERT fail (SQLSTATE 23505), and the batch is redone with its stored answers looked up first
/// (a device resending a batch whose answer it never got). If PostgreSQL refuses anything else (a value a
/// constraint rejects, a concurrent insert of the same key, a deadlock), the transaction is rolled back and every
/// change is redone in its own transaction, so one bad change never stops the others.
extension ChangeMerger {
    static func merge(_ prepared: [PreparedChange], context: BatchContext, on pg: PostgresConnection) throws
        -> [ChangeResult]
    {
        guard !prepared.isEmpty else { return [] }
        let segments = segments(prepared)
        do {
            return try mergeBatch(segments, context: context, resent: false, on: pg)
        } catch let error as PostgresQueryError where error.sqlState == "23505" {
            rollback(pg)
            guard pg.isConnected else { throw error }
            do {
                return try mergeBatch(segments, context: context, resent: true, on: pg)
            } catch {
                rollback(pg)
                guard pg.isConnected else { throw error }
            }
        } catch {
            rollback(pg)
            guard pg.isConnected else { throw error }
        }
        // Slow path: a transaction per change.
        return try prepared.map { try mergeAlone($0, context: context, on: pg) }
    }

    /// The fast path over a batch's segments, in one transaction. `resent`: some change may have been answered
    /// before, so the first segment's stored answers are looked up before anything is written; otherwise its
    /// updates without conflict are written in the round trip of `BEGIN`.
    static func mergeBatch(
        _ segments: [[PreparedChange]], context: BatchContext, resent: Bool, on pg: PostgresConnection
    ) throws -> [ChangeResult] {
        let (stored, written) = try begin(context, first: segments[0], lookingUp: resent, on: pg)
        var results: [ChangeResult] = []
        results.reserveCapacity(segments.reduce(0) { $0 + $1.count })
        for (n, segment) in segments.enumerated() {
            results += try mergeSegment(
                segment, context: context, stored: n == 0 ? stored : nil, written: n == 0 ? written : nil,
                commit: n == segments.count - 1, on: pg)
        }
        return results
    }

    /// Opens the transaction in one round trip: `BEGIN`, on a scoped dataset the caller's scope for this
    /// transaction (bound, never spliced), and then either (`lookingUp`) the answers stored for the first segment
    /// `first`, or its updates without conflict (``updatesWithoutConflictStatements(_:schema:context:)``). Returns
    /// the stored answers (empty without `lookingUp`: the answers' INSERT finds any) and the rows written, by table
    /// and index into its changes (``tableGroups(_:stored:)``; nil with `lookingUp`).
    ///
    /// Two requests carrying the same change id at once (a device retrying while its first upload still runs) are
    /// settled by `ferry_changes`' primary key too: the later transaction's INSERT waits for the earlier one and then
    /// fails on the id, and the batch is redone with the answers looked up.
    static func begin(_ context: BatchContext, first: [PreparedChange], lookingUp: Bool, on pg: PostgresConnection)
        throws -> (stored: [String: ChangeResult], written: [String: [Int: [String: JSONValue]]]?)
    {
        var statements: [PostgresConnection.PipelinedStatement] = [.init("BEGIN")]
        if let scope = context.scope { statements.append(.init(ScopeSQL.setScopeSQL, [scope])) }
        if lookingUp {
            statements.append(.init(storedAnswersSQL, storedAnswersParameters(first, context: context)))
            return (try storedAnswers(from: try pg.runPipeline(statements).last ?? [], context: context), nil)
        }
        let written = statements.count
        var ahead: [(table: String, group: [Int], schema: TableSchema)] = []
        for (table, indexes) in tableGroups(first, stored: [:]).sorted(by: { $0.key < $1.key }) {
            let changes = indexes.map { first[$0].validChange! }
            let schema = changes[0].schema
            for (group, statement) in updatesWithoutConflictStatements(changes, schema: schema, context: context) {
                ahead.append((table, group, schema))
                statements.append(statement)
            }
        }
        let answers = try pg.runPipeline(statements)
        var rows: [String: [Int: [String: JSONValue]]] = [:]
        for (k, write) in ahead.enumerated() {
            for (j, row) in try byOrdinal(answers[written + k], schema: write.schema, expected: nil, what: "update") {
                rows[write.table, default: [:]][write.group[j]] = row
            }
        }
        return ([:], rows)
    }

    /// Splits a batch where a change id or a row repeats, so that within a segment every decision can be made
    /// from one read and later changes of the same row see the earlier ones.
    static func segments(_ prepared: [PreparedChange]) -> [[PreparedChange]] {
        guard !prepared.isEmpty else { return [] }
        // Where each segment starts; most batches are one segment, returned without copying a change.
        var starts: [Int] = [0]
        var ids: Set<String> = []
        var rows: Set<ValidChange.RowIdentity> = []
        ids.reserveCapacity(prepared.count)
        rows.reserveCapacity(prepared.count)
        for (i, change) in prepared.enumerated() {
            let row = change.validChange?.rowIdentity
            if ids.contains(change.change.id) || (row.map { rows.contains($0) } ?? false) {
                starts.append(i)
                ids = []
                rows = []
            }
            ids.insert(change.change.id)
            if let row { rows.insert(row) }
        }
        if starts.count == 1 { return [prepared] }
        return starts.indices.map { k in
            Array(prepared[starts[k]..<(k + 1 < starts.count ? starts[k + 1] : prepared.count)])
        }
    }

    /// Decides and writes one segment inside the caller's transaction. `stored`: the answers stored for its ids,
    /// when the caller knows them already. `written`: the rows ``begin(_:first:lookingUp:on:)`` wrote, nil
    /// if it did not. `commit`: the transaction ends with this segment (its COMMIT goes with the
    /// answers).
    static func mergeSegment(
        _ segment: [PreparedChange], context: BatchContext, stored: [String: ChangeResult]? = nil,
        written: [String: [Int: [String: JSONValue]]]? = nil, commit: Bool, on pg: PostgresConnection
    ) throws -> [ChangeResult] {
        var results = [ChangeResult?](repeating: nil, count: segment.count)
        var fresh: [Int] = []  // answers to store
        let storedByID = try stored ?? storedAnswers(segment, context: context, on: pg)
        for (i, change) in segment.enumerated() {
            if let answer = storedByID[change.change.id] {
                results[i] = answer
                continue
            }
            fresh.append(i)
            if case .invalid(let message) = change.body {
                results[i] = ChangeResult(id: change.change.id, status: .invalid, row: nil, message: message)
            }
        }
        let byTable = tableGroups(segment, stored: storedByID)
        // Tables in one fixed order.
        for name in byTable.keys.sorted() {
            let indexes = byTable[name]!
            let answers = try mergeTable(
                indexes, of: segment, context: context, written: written.map { $0[name] ?? [:] }, on: pg)
            for (j, answer) in answers.enumerated() { results[indexes[j]] = answer }
        }

        let answers = results.map { $0! }
        try storeAnswers(fresh.map { answers[$0] }, context: context, commit: commit, on: pg)
        return answers
    }

    /// The valid changes of `segment` without a `stored` answer, as indexes into it, by table.
    static func tableGroups(_ segment: [PreparedChange], stored: [String: ChangeResult]) -> [String: [Int]] {
        var byTable: [String: [Int]] = [:]
        for (i, change) in segment.enumerated() where stored[change.change.id] == nil {
            if let valid = change.validChange { byTable[valid.schema.name, default: []].append(i) }
        }
        return byTable
    }

    /// What the merge rule decided for each of one table's changes, and which of them name a row outside the
    /// caller's scope (answered `forbidden`).
    struct TableDecisions {
        var decisions: [MergeDecision]
        var outOfScope: Set<Int>
        /// The changes as they are written: an update merged per column narrowed to the columns it keeps.
        var changes: [ValidChange]

        /// The indexes of the answers that carry the server's row unwritten: rejections (not the out-of-scope
        /// ones) and merges that write nothing.
        var rejected: [Int] {
            decisions.indices.filter { j in
                switch decisions[j] {
                case .reject: return !outOfScope.contains(j)
                case .merge: return changes[j].columns.isEmpty
                default: return false
                }
            }
        }
    }

    /// Decides and writes one table's changes of a segment (`indexes` into `segment`, all valid and of one
    /// table): the answers, in the order of `indexes`. Updates that the rule applies as they find the row are
    /// written first, in one statement per shape (``updatesWithoutConflict(_:schema:context:on:)``); only the rest
    /// are locked, read and decided in Swift (``decideAndWrite(_:of:context:on:)``).
    /// `written`: those updates' rows if the caller wrote them already, by index into `indexes`.
    static func mergeTable(
        _ indexes: [Int], of segment: [PreparedChange], context: BatchContext, written: [Int: [String: JSONValue]]?,
        on pg: PostgresConnection
    ) throws -> [ChangeResult] {
        let changes = indexes.map { segment[$0].validChange! }
        var answers = [ChangeResult?](repeating: nil, count: indexes.count)
        let ahead = try written ?? updatesWithoutConflict(changes, schema: changes[0].schema, context: context, on: pg)
        for (j, row) in ahead {
            answers[j] = ChangeResult(id: segment[indexes[j]].change.id, status: .applied, row: row, message: nil)
        }
        let rest = answers.indices.filter { answers[$0] == nil }
        if !rest.isEmpty {
            let decided = try decideAndWrite(rest.map { indexes[$0] }, of: segment, context: context, on: pg)
            for (k, answer) in decided.enumerated() { answers[rest[k]] = answer }
        }
        return answers.map { $0! }
    }

    /// Locks, decides and writes one table's changes of a segment (`indexes` into `segment`): the answers, in the
    /// order of `indexes`.
    static func decideAndWrite(
        _ indexes: [Int], of segment: [PreparedChange], context: BatchContext, on pg: PostgresConnection
    ) throws -> [ChangeResult] {
        let schema = segment[indexes[0]].validChange!.schema
        let decided = try decide(indexes.map { segment[$0].validChange! }, schema: schema, context: context, on: pg)
        let changes = decided.changes
        // A rejection answers with the server's row (the winner); read only those rows, locked above and not
        // written by this segment.
        let rejected = decided.rejected
        var serverRows: [Int: [String: JSONValue]] = [:]
        if !rejected.isEmpty {
            for (k, row) in try rows(rejected.map { changes[$0] }, schema: schema, on: pg) {
                serverRows[rejected[k]] = row
            }
        }
        let written = try write(changes, decisions: decided.decisions, schema: schema, context: context, on: pg)
        return try decided.decisions.enumerated().map { j, decision in
            let id = segment[indexes[j]].change.id
            switch decision {
            case .insert, .update:
                guard let row = written[j] else {
                    throw MergeInvariantError(table: schema.name, "a write returned no row")
                }
                return ChangeResult(id: id, status: .applied, row: row, message: nil)
            case .delete:
                return ChangeResult(id: id, status: .applied, row: nil, message: nil)
            case .reject(let message) where decided.outOfScope.contains(j):
                return ChangeResult(id: id, status: .forbidden, row: nil, message: message)
            case .reject(let message):
                return ChangeResult(id: id, status: .rejected, row: serverRows[j], message: message)
            case .gone(let message):
                return ChangeResult(id: id, status: .gone, row: nil, message: message)
            case .merge(let lost, let message):
                return ChangeResult(
                    id: id, status: .merged, row: written[j] ?? serverRows[j], message: message, lost: lost)
            }
        }
    }

    /// Locks the rows one table's changes name and decides each change under the table's merge rule.
    static func decide(_ changes: [ValidChange], schema: TableSchema, context: BatchContext, on pg: PostgresConnection)
        throws -> TableDecisions
    {
        let compared = comparedColumns(changes, schema: schema)
        var (current, unchanged) = try lockRows(changes, schema: schema, comparing: compared, on: pg)
        let comparedIndex = Dictionary(uniqueKeysWithValues: compared.enumerated().map { ($0.element.name, $0.offset) })
        // On a scoped dataset, an existing row outside the caller's scope is not theirs to see or touch:
        // forbidden, and its content never goes into the answer.
        var outOfScope: Set<Int> = []
        if let rows = context.visibility[schema.name] {
            let existing = changes.indices.filter { current[$0] != nil }
            let visible = try visibleChanges(existing.map { changes[$0] }, rows: rows, schema: schema, on: pg).map {
                existing[$0]
            }
            outOfScope = Set(existing).subtracting(visible)
            for j in outOfScope {
                current[j] = nil
            }
        }
        let insertsWithoutRow = changes.indices.filter { changes[$0].op == .insert && current[$0] == nil }
        let tombstoned = try tombstones(
            insertsWithoutRow.map { changes[$0] }, schema: schema, context: context, on: pg
        )
        .map { insertsWithoutRow[$0] }

        var decisions: [MergeDecision] = []
        decisions.reserveCapacity(changes.count)
        var narrowed = changes
        for (j, change) in changes.enumerated() {
            if outOfScope.contains(j) {
                decisions.append(.reject(forbiddenMessage))
                continue
            }
            let row = current[j].map { MergeDecision.ServerRow(updatedMillis: $0) }
            if let row, change.bases != nil {
                let same = unchanged[j].map { same in
                    change.columns.indices.map { i -> Bool? in
                        guard change.bases?[i] != nil else { return nil }
                        return comparedIndex[change.columns[i].name].map { same[$0] }
                    }
                }
                let (decision, kept) = decideColumns(change, row: row, unchanged: same, schema: schema)
                decisions.append(decision)
                narrowed[j] = kept
                continue
            }
            decisions.append(
                MergeDecision.decide(
                    op: change.op, rule: schema.table.merge, row: row,
                    tombstoned: tombstoned.contains(j), baseMillis: change.baseMillis,
                    editedMillis: change.editedMillis))
        }
        return TableDecisions(
            decisions: decisions, outOfScope: outOfScope, changes: narrowed)
    }

    /// On a table merged per column: the columns some change of `changes` carries a base for (additive ones
    /// aside), in table order. ``lockRows(_:schema:comparing:on:)`` compares each with its base as it locks the row.
    static func comparedColumns(_ changes: [ValidChange], schema: TableSchema) -> [TableSchema.Column] {
        guard schema.table.columnMerge.perColumn else { return [] }
        var names = Set<String>()
        for change in changes {
            guard let bases = change.bases else { continue }
            for (i, column) in change.columns.enumerated() where bases[i] != nil && !change.additive[i] {
                names.insert(column.name)
            }
        }
        return names.isEmpty ? [] : schema.columns.filter { names.contains($0.name) }
    }

    /// Decides an update that carries bases, on a table merged per column or with additive columns: `update` when
    /// every column is written, else `merge` with the lost columns and the change narrowed to the kept ones.
    /// `unchanged`: per column of the change, whether the server's value still equals its base (nil: not compared).
    static func decideColumns(
        _ change: ValidChange, row: MergeDecision.ServerRow, unchanged: [Bool?]?, schema: TableSchema
    ) -> (MergeDecision, ValidChange) {
        let (kept, lost) = MergeDecision.decideColumns(
            rule: schema.table.merge, perColumn: schema.table.columnMerge.perColumn, row: row,
            unchanged: unchanged ?? Array(repeating: nil, count: change.columns.count), additive: change.additive,
            baseMillis: change.baseMillis, editedMillis: change.editedMillis)
        guard !lost.isEmpty else { return (.update, change) }
        let names = lost.map { change.columns[$0].name }.sorted()
        let message =
            "\(names.joined(separator: ", ")) changed on the server at \(Timestamp.format(unixMillis: row.updatedMillis)); "
            + "\(schema.table.merge.rawValue) keeps the server's values there"
            + (kept.isEmpty ? "" : " and writes your other columns")
        return (.merge(lost: names, message: message), change.keeping(kept))
    }

    /// Carries out one table's decided updates, inserts and deletes (one statement per shape): the written rows,
    /// by index into `changes`. On a scoped dataset a write must leave the row inside the scope (a filter column
    /// moved out, a child of an invisible parent): otherwise it throws ``ScopeViolation``, and the batch is redone
    /// change by change and this one answered forbidden.
    static func write(
        _ changes: [ValidChange], decisions: [MergeDecision], schema: TableSchema, context: BatchContext,
        on pg: PostgresConnection
    ) throws -> [Int: [String: JSONValue]] {
        let updates = decisions.indices.filter { j in
            if case .merge = decisions[j] { return !changes[j].columns.isEmpty }
            return decisions[j] == .update
        }
        let inserts = decisions.indices.filter { decisions[$0] == .insert }
        let deletes = decisions.indices.filter { decisions[$0] == .delete }
        var written: [Int: [String: JSONValue]] = [:]
        for group in grouped(updates, changes) {
            for (k, row) in try update(group.map { changes[$0] }, schema: schema, context: context, on: pg) {
                written[group[k]] = row
            }
        }
        for group in grouped(inserts, changes) {
            for (k, row) in try insert(group.map { changes[$0] }, schema: schema, context: context, on: pg) {
                written[group[k]] = row
            }
        }
        if !deletes.isEmpty {
            try delete(deletes.map { changes[$0] }, schema: schema, context: context, on: pg)
        }
        if let rows = context.visibility[schema.name] {
            let writes = (updates + inserts).sorted()
            let visible = try visibleChanges(writes.map { changes[$0] }, rows: rows, schema: schema, on: pg)
            if visible.count != writes.count { throw ScopeViolation() }
        }
        return written
    }

    static func encode(_ result: ChangeResult) -> String {
        String(decoding: AnswerJSON.encode(result), as: UTF8.self)
    }

    /// Indexes grouped by the shape of their SQL (same changed columns), in first-seen order.
    static func grouped(_ indexes: [Int], _ changes: [ValidChange]) -> [[Int]] {
        var order: [String] = []
        var groups: [String: [Int]] = [:]
        for i in indexes {
            let shape = changes[i].shape
            if groups[shape] == nil { order.append(shape) }
            groups[shape, default: []].append(i)
        }
        return order.map { groups[$0]! }
    }
}
