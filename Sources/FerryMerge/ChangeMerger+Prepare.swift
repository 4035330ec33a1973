import FerryCore

/// One change after validation against the table metadata: either an `invalid` answer or the typed parameters
/// the SQL needs. Names from the request are only ever used as lookup keys into ``TableSchema``.
struct PreparedChange: Sendable {
    let change: Change
    let body: Body

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
    let valueParameters: [String?]
    let baseMillis: Int64?
    /// `editedAt` on the server's clock (see ``MergeDecision/normalise(editedMillis:sentMillis:serverNowMillis:)``).
    let editedMillis: Int64

    /// Identifies the row inside a batch (a second change of the same row goes to a later segment).
    var rowIdentity: String {
        schema.name + "\u{0}" + keyParameters.map { $0 ?? "\u{1}" }.joined(separator: "\u{0}")
    }

    /// Identifies the shape of the SQL for this change, so changes of one shape share one statement.
    var shape: String { columns.map(\.name).joined(separator: "\u{0}") }
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
        return PreparedChange(
            change: change,
            body: .valid(
                ValidChange(
                    op: change.op, schema: schema, keyParameters: keyParameters, columns: columns,
                    valueParameters: valueParameters,
                    baseMillis: change.op == .insert ? nil : base, editedMillis: normalised)))
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
