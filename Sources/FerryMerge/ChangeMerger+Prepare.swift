import FerryCore
import Foundation

/// One change after validation against the table metadata: either an `invalid` answer or the typed parameters
/// the SQL needs. Names from the request are only ever used as lookup keys into ``TableSchema``. A class: a batch's
/// changes are grouped and regrouped by segment and table, and each copy of a struct this size retained every
/// field of it (the copies were a visible share of the merge engine's own CPU in its profile).
final class PreparedChange: Sendable {
    let change: Change
    let body: Body

    init(change: Change, body: Body) {
        self.change = change
        self.body = body
    }

    enum Body: Sendable {
        case invalid(String)
        case valid(ValidChange)
    }

    var validChange: ValidChange? {
        if case .valid(let v) = body { return v }
        return nil
    }
}

struct ValidChange: Sendable {
    let op: Change.Operation
    let schema: TableSchema
    /// Key values as text, in `schema.key` order.
    let keyParameters: [String?]
    /// Changed columns (never key or timestamp columns), sorted by name, and their values as text.
    let columns: [TableSchema.Column]
    var valueParameters: [String?]
    let baseMillis: Int64?
    /// `editedAt` on the server's clock (see ``MergeDecision/normalise(editedMillis:sentMillis:serverNowMillis:)``).
    let editedMillis: Int64
    /// Per column of ``columns``: the base the device saw, as text (see ``BaseText``), nil where it gave none. Nil
    /// as a whole for a change merged by row (a row-level table, an insert or delete, a device without bases).
    var bases: [BaseText?]? = nil
    /// Per column of ``columns``: whether its value parameter is a difference to add (an additive column).
    var additive: [Bool] = []

    /// Identifies the row inside a batch (a second change of the same row goes to a later segment).
    var rowIdentity: RowIdentity { RowIdentity(table: ObjectIdentifier(schema), key: keyParameters) }

    /// A table (its schema, one object per table of a merger) and a key.
    struct RowIdentity: Hashable {
        let table: ObjectIdentifier
        let key: [String?]
    }

    /// Whether this change's key comes before `other`'s (of the same table): integer key columns by value, others by
    /// their UTF-8 bytes. One order for every batch, so that updates written without a read first lock shared rows in
    /// the same order (``ChangeMerger/updatesWithoutConflictStatements(_:schema:context:)``).
    func keyPrecedes(_ other: ValidChange) -> Bool {
        for (k, column) in schema.key.enumerated() {
            let (a, b) = (keyParameters[k] ?? "", other.keyParameters[k] ?? "")
            if a == b { continue }
            if column.sourceKind == .integer, let x = Int64(a), let y = Int64(b) { return x < y }
            return a.utf8.lexicographicallyPrecedes(b.utf8)
        }
        return false
    }

    /// Identifies the shape of the SQL for this change, so changes of one shape share one statement.
    var shape: String {
        columns.enumerated().map { additive.isEmpty || !additive[$0.offset] ? $0.element.name : "+" + $0.element.name }
            .joined(separator: "\u{0}")
    }

    /// This change narrowed to the columns at `kept` (in order): what is written of a change merged per column.
    func keeping(_ kept: [Int]) -> ValidChange {
        var out = ValidChange(
            op: op, schema: schema, keyParameters: keyParameters, columns: kept.map { columns[$0] },
            valueParameters: kept.map { valueParameters[$0] }, baseMillis: baseMillis, editedMillis: editedMillis)
        out.bases = bases.map { b in kept.map { b[$0] } }
        out.additive = additive.isEmpty ? [] : kept.map { additive[$0] }
        return out
    }
}

/// A column's base as the text PostgreSQL parses for it (``TableSchema/parameter(_:for:table:)``); `text` nil is
/// NULL.
struct BaseText: Sendable, Equatable {
    let text: String?
}

extension ChangeMerger {
    func prepare(_ change: Change, sentMillis: Int64, nowMillis: Int64) -> PreparedChange {
        func invalid(_ message: String) -> PreparedChange { PreparedChange(change: change, body: .invalid(message)) }
        guard let schema = schemas[change.table] else {
            if readOnly.contains(change.table) {
                return invalid("table '\(change.table)' is read-only (writable: false in the template)")
            }
            return invalid("unknown table '\(change.table)': it is not a table of dataset \(dataset)")
        }
        let table = schema.name
        guard let edited = Timestamp.parseMillis(change.editedAt) else {
            return invalid(
                "editedAt '\(change.editedAt)' is not an ISO-8601 timestamp such as 2026-11-21T10:00:00.000Z")
        }
        var base: Int64?
        if let text = change.baseUpdatedAt {
            guard let millis = Timestamp.parseMillis(text) else {
                return invalid("baseUpdatedAt '\(text)' is not an ISO-8601 timestamp such as 2026-11-21T10:00:00.000Z")
            }
            base = millis
        }

        let keyParameters: [String?]
        let columns: [TableSchema.Column]
        let valueParameters: [String?]
        do {
            keyParameters = try Self.keyParameters(of: change, schema: schema)
            (columns, valueParameters) = try Self.valueParameters(of: change, schema: schema, key: keyParameters)
        } catch {
            return invalid(error.message)
        }
        switch change.op {
        case .update where columns.isEmpty:
            return invalid("update of \(table) carries no values to change")
        case .delete where !columns.isEmpty:
            return invalid("delete of \(table) must not carry values")
        default:
            break
        }
        let normalised = MergeDecision.normalise(
            editedMillis: edited, sentMillis: sentMillis, serverNowMillis: nowMillis)
        var valid = ValidChange(
            op: change.op, schema: schema, keyParameters: keyParameters, columns: columns,
            valueParameters: valueParameters,
            baseMillis: change.op == .insert ? nil : base, editedMillis: normalised)
        if change.op == .update, let bases = change.base, !schema.table.columnMerge.isRowLevel {
            do {
                valid = try Self.withBases(valid, bases, schema: schema)
            } catch {
                return invalid(error.message)
            }
        }
        return PreparedChange(change: change, body: .valid(valid))
    }

    /// An update of a table merged per column or with additive columns, with the bases its device sent: each
    /// column's base as text, and each additive column's value replaced by its difference from the base (a NULL
    /// base counts as 0). A column without a base is judged by the row's `baseUpdatedAt`, and written as sent.
    static func withBases(_ change: ValidChange, _ bases: [String: JSONValue], schema: TableSchema)
        throws(TableSchema.ConversionError) -> ValidChange
    {
        var out = change
        var texts: [BaseText?] = []
        var additive: [Bool] = []
        let adding = schema.additive
        for (i, column) in change.columns.enumerated() {
            guard let base = bases[column.name] else {
                texts.append(nil)
                additive.append(false)
                continue
            }
            let text = try TableSchema.parameter(base, for: column, table: schema.name).get()
            texts.append(BaseText(text: text))
            let adds = adding.contains(column.name)
            additive.append(adds)
            if adds {
                out.valueParameters[i] = try difference(
                    change.valueParameters[i], minus: text, column: column, table: schema.name)
            }
        }
        out.bases = texts
        out.additive = additive
        return out
    }

    /// `value − base` of an additive column, as the text PostgreSQL parses for it.
    static func difference(_ value: String?, minus base: String?, column: TableSchema.Column, table: String)
        throws(TableSchema.ConversionError) -> String
    {
        guard let value else {
            throw TableSchema.ConversionError(
                message: "additive column \(table).\(column.name) cannot be set to null (merge.add in the template)")
        }
        let base = base ?? "0"
        switch column.sourceKind {
        case .integer:
            if let v = Int64(value), let b = Int64(base) {
                let (d, overflow) = v.subtractingReportingOverflow(b)
                if !overflow { return String(d) }
            }
        case .real:
            if let v = Double(value), let b = Double(base), (v - b).isFinite { return String(v - b) }
        default:
            if let v = Decimal(string: value), let b = Decimal(string: base) { return "\(v - b)" }
        }
        throw TableSchema.ConversionError(
            message: "additive column \(table).\(column.name): cannot subtract base \(base) from \(value)")
    }

    /// The key of `change` as text in `schema.key` order: exactly the primary-key columns, none null.
    static func keyParameters(of change: Change, schema: TableSchema) throws(TableSchema.ConversionError)
        -> [String?]
    {
        let table = schema.name
        for name in change.key.keys where !schema.key.contains(where: { $0.name == name }) {
            throw TableSchema.ConversionError(
                message:
                    "key column '\(name)' is not part of the primary key of \(table) (\(schema.key.map(\.name).joined(separator: ", ")))"
            )
        }
        var keyParameters: [String?] = []
        keyParameters.reserveCapacity(schema.key.count)
        for column in schema.key {
            guard let value = change.key[column.name] else {
                throw TableSchema.ConversionError(
                    message: "the key lacks primary-key column '\(column.name)' of \(table)")
            }
            if value == .null {
                throw TableSchema.ConversionError(
                    message: "primary-key column \(table).\(column.name) cannot be null")
            }
            keyParameters.append(try TableSchema.parameter(value, for: column, table: table).get())
        }
        return keyParameters
    }

    /// The changed columns of `change`, sorted by name, and their values as text: only exported columns;
    /// timestamps are the server's to stamp (dropped); a key column may only repeat its `key` value.
    static func valueParameters(of change: Change, schema: TableSchema, key keyParameters: [String?])
        throws(TableSchema.ConversionError) -> ([TableSchema.Column], [String?])
    {
        let table = schema.name
        var columns: [TableSchema.Column] = []
        var valueParameters: [String?] = []
        for name in change.values.keys.sorted() {
            guard let column = schema.byName[name] else {
                throw TableSchema.ConversionError(
                    message:
                        "unknown column '\(name)' in table \(table): not one of the columns this dataset's devices edit (\(schema.columns.map(\.name).joined(separator: ", ")))"
                )
            }
            if name == schema.created?.name || name == schema.updated?.name { continue }
            let converted = try TableSchema.parameter(change.values[name]!, for: column, table: table).get()
            if let k = schema.key.firstIndex(where: { $0.name == name }) {
                if converted != keyParameters[k] {
                    throw TableSchema.ConversionError(
                        message:
                            "primary-key column \(table).\(name) cannot change; delete the row and insert a new one")
                }
                continue
            }
            columns.append(column)
            valueParameters.append(converted)
        }
        return (columns, valueParameters)
    }
}
