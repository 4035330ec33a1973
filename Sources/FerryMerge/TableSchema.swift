import FerryCore
import FerryPostgres
import Foundation

/// A writable table resolved against PostgreSQL's catalog at start-up: every identifier the merge engine puts
/// into SQL comes from here (names read from `pg_attribute`, checked and quoted by `SQLIdentifier`), never from a
/// request. A class: every change of a batch carries its table's schema, and copying a reference is one retain
/// where copying the struct was one per stored array and string.
final class TableSchema: Sendable {
    /// How a column's values travel: the SQLite/JSON form of the publisher's type mapping (issue 2).
    enum Kind: Sendable, Equatable {
        case integer, boolean, real, numeric, text, uuid, timestamptz, timestamp, date, json, bytea, array
    }

    struct Column: Sendable {
        /// The name devices use: the SQLite column (the template's `rename:` of ``sourceName``).
        let name: String
        /// The PostgreSQL column: every piece of SQL uses this one (``quoted``).
        let sourceName: String
        /// `format_type(atttypid, atttypmod)`: the cast target for bound text parameters.
        let typeName: String
        /// How devices send and receive values: the source column's kind, or the type the template's query casts
        /// the column to (``exportType``).
        let kind: Kind
        /// The source column's own kind, which decides how a bound text becomes the column's value.
        let sourceKind: Kind
        /// The type the template's query casts this column to (an older line's type), nil when it keeps its own:
        /// answers are cast to it, so they carry what the line's snapshot holds.
        let exportType: String?
        var quoted: String { SQLIdentifier.quote(sourceName) }

        init(
            name: String, sourceName: String? = nil, typeName: String, kind: Kind, sourceKind: Kind? = nil,
            exportType: String? = nil
        ) {
            self.name = name
            self.sourceName = sourceName ?? name
            self.typeName = typeName
            self.kind = kind
            self.sourceKind = sourceKind ?? kind
            self.exportType = exportType
        }
    }

    let table: MergeTable
    /// The table as PostgreSQL prints its regclass (schema-qualified and quoted as needed).
    let sqlName: String
    /// Exported columns in catalog order, named as devices name them.
    let columns: [Column]
    let byName: [String: Column]
    let key: [Column]
    let created: Column?
    let updated: Column?
    /// The template's additive columns (`merge.add`), looked up once per change with a base.
    let additive: Set<String>

    var name: String { table.name }

    init(
        table: MergeTable, sqlName: String, columns: [Column], byName: [String: Column], key: [Column],
        created: Column?, updated: Column?
    ) {
        self.table = table
        self.sqlName = sqlName
        self.columns = columns
        self.byName = byName
        self.key = key
        self.created = created
        self.updated = updated
        additive = Set(table.columnMerge.additive)
    }

    /// Reads the catalog for `table` and checks the template's names against it: the columns a device of this
    /// line sees (the query's output columns of the source, minus excluded ones, renamed), its key and stamps.
    static func resolve(_ table: MergeTable, on pg: PostgresConnection) throws -> TableSchema {
        let catalog = try CatalogTable.read(table, on: pg)
        let sqlName = catalog.sqlName
        let columns = try exportedColumns(table, catalog: catalog, on: pg)
        var byName: [String: Column] = [:]
        for column in columns {
            guard byName.updateValue(column, forKey: column.name) == nil else {
                throw templateError(
                    table,
                    "column '\(column.name)' of \(sqlName) appears twice after rename; rename or exclude one of them")
            }
        }
        let keyNames =
            table.primaryKey.isEmpty
            ? catalog.key.map { source in table.renames.first { $0.value == source }?.key ?? source }
            : table.primaryKey
        guard !keyNames.isEmpty else {
            throw templateError(table, "\(sqlName) has no primary key; declare `primaryKey:` in the template")
        }
        let key = try keyNames.map { name in
            guard let column = byName[name] else {
                throw templateError(table, "primary-key column '\(name)' is not an exported column of \(sqlName)")
            }
            return column
        }
        let created = try stamp(table.createdColumn, "created", of: table, sqlName: sqlName, byName: byName)
        let updated = try stamp(table.updatedColumn, "updated", of: table, sqlName: sqlName, byName: byName)
        if table.writable && updated == nil {
            throw templateError(
                table, "writable table needs an updated-at column (timestamps.updated) to detect conflicts")
        }
        for name in table.columnMerge.additive {
            guard let column = byName[name], !keyNames.contains(name), name != created?.name, name != updated?.name
            else {
                throw templateError(
                    table, "merge.add names '\(name)', which is not an exported value column of \(sqlName)")
            }
            guard [.integer, .real, .numeric].contains(column.sourceKind) else {
                throw templateError(
                    table, "merge.add names '\(name)', a \(column.typeName) column of \(sqlName); only numbers add")
            }
        }
        return TableSchema(
            table: table, sqlName: sqlName, columns: columns, byName: byName, key: key, created: created,
            updated: updated)
    }

    /// A template error about `table`, keyed to its entry.
    static func templateError(_ table: MergeTable, _ message: String) -> FerryError {
        FerryError(.badTemplate, message, key: "tables.\(table.name)")
    }

    /// A source table as PostgreSQL's catalog describes it: every live column in catalog order, each column's
    /// type oid and the primary key's column names.
    struct CatalogTable {
        let sqlName: String
        let columns: [Column]
        let typeOIDs: [String: String]
        let key: [String]

        /// Reads `table.source` from the catalog, failing with the fix when it does not exist or a column name
        /// cannot be quoted.
        static func read(_ table: MergeTable, on pg: PostgresConnection) throws -> CatalogTable {
            let found: [[String?]]
            do {
                found = try pg.run(
                    "SELECT c.oid::text, c.oid::regclass::text FROM pg_class c WHERE c.oid = to_regclass($1)",
                    [table.source])
            } catch {
                throw templateError(table, "cannot look up source '\(table.source)': \(error.message)")
            }
            guard let first = found.first, let oid = first[0], let sqlName = first[1] else {
                throw templateError(
                    table, "source table '\(table.source)' does not exist in PostgreSQL; check `source:`")
            }
            let rows = try pg.run(
                """
                SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typname, t.typcategory,
                       COALESCE(e.typname, ''), a.attnum = ANY(COALESCE(i.indkey::int2[], '{}')), a.atttypid::text
                FROM pg_attribute a
                JOIN pg_type t ON t.oid = a.atttypid
                LEFT JOIN pg_type e ON e.oid = t.typbasetype
                LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
                WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped
                ORDER BY a.attnum
                """, [oid])
            var columns: [Column] = []
            var typeOIDs: [String: String] = [:]
            var key: [String] = []
            for row in rows {
                guard let name = row[0], let typeName = row[1], let typname = row[2], let category = row[3] else {
                    continue
                }
                guard SQLIdentifier.isQuotable(name) else {
                    throw templateError(
                        table,
                        "column name '\(name)' of \(sqlName) cannot be used in SQL (empty, over 63 bytes or with control characters); rename it"
                    )
                }
                let base = row[4] ?? ""
                columns.append(
                    Column(
                        name: name, typeName: typeName,
                        kind: kind(typname: base.isEmpty ? typname : base, category: category)))
                if row[5] == "t" { key.append(name) }
                typeOIDs[name] = row[6]
            }
            return CatalogTable(sqlName: sqlName, columns: columns, typeOIDs: typeOIDs, key: key)
        }
    }

    /// The columns a device of this line sees, in catalog order and named as devices name them: the template's
    /// `columns`, narrowed to the query's output, minus redacted ones, with `rename:` applied.
    static func exportedColumns(_ table: MergeTable, catalog: CatalogTable, on pg: PostgresConnection) throws
        -> [Column]
    {
        let sqlName = catalog.sqlName
        var columns = catalog.columns
        if let wanted = table.columns {
            let known = Set(catalog.columns.map(\.name))
            for name in wanted where !known.contains(name) {
                throw templateError(
                    table, "column '\(name)' is not a column of \(sqlName); check the template's query/exclude")
            }
            columns = catalog.columns.filter { wanted.contains($0.name) }
        }
        if let query = table.query {
            columns = try queryColumns(query, of: columns, typeOIDs: catalog.typeOIDs, table: table, on: pg)
        }
        // Redacted columns are never exported, so devices can neither see nor write them (a key column stays).
        let sourceKey = table.primaryKey.map { table.renames[$0] ?? $0 }
        columns.removeAll { table.excludedColumns.contains($0.sourceName) && !sourceKey.contains($0.sourceName) }
        // The names devices use: the template's `rename:` (SQLite name → PostgreSQL column).
        for (name, source) in table.renames.sorted(by: { $0.key < $1.key }) {
            guard columns.contains(where: { $0.sourceName == source }) else {
                throw templateError(
                    table,
                    "rename '\(name)': '\(source)' is not an exported column of \(sqlName); check the template's rename/query/exclude"
                )
            }
        }
        return columns.map { column in
            guard let shown = table.renames.first(where: { $0.value == column.sourceName })?.key else { return column }
            return Column(
                name: shown, sourceName: column.sourceName, typeName: column.typeName, kind: column.kind,
                sourceKind: column.sourceKind, exportType: column.exportType)
        }
    }

    /// The `created`/`updated` stamp column `name`, checked to be a timestamp; nil when the template names none,
    /// or (on a read-only table) names one the line does not export.
    static func stamp(
        _ name: String?, _ what: String, of table: MergeTable, sqlName: String, byName: [String: Column]
    ) throws -> Column? {
        guard let name else { return nil }
        guard let column = byName[name] else {
            if table.writable {
                throw templateError(
                    table, "\(what) column '\(name)' is not a column of \(sqlName); check `timestamps:`")
            }
            return nil
        }
        guard column.sourceKind == .timestamptz || column.sourceKind == .timestamp else {
            throw templateError(
                table, "\(what) column '\(name)' of \(sqlName) is \(column.typeName); it must be a timestamp")
        }
        return column
    }

    /// The columns of `columns` that the template's `query:` outputs under their own name (a computed or
    /// `AS`-renamed column is no column of the source, so it cannot be written), each with the type the query
    /// gives it when that differs from the source's.
    static func queryColumns(
        _ query: String, of columns: [Column], typeOIDs: [String: String], table: MergeTable, on pg: PostgresConnection
    ) throws -> [Column] {
        // Only the output's shape matters here: `:scope` stands for NULL, which every comparison accepts.
        let sql = ScopeSQL.usesScope(query) ? ScopeSQL.substitute(query, with: "NULL") : query
        let output: [(name: String, oid: UInt32)]
        do {
            output = try pg.describe("SELECT * FROM (\(sql)) AS q")
        } catch let error as FerryError {
            throw templateError(table, "the template's query fails in PostgreSQL: \(error.message)")
        }
        let oids = Set(output.map(\.oid)).map(String.init)
        var types: [String: (name: String, kind: Kind)] = [:]
        for row in try pg.run(
            """
            SELECT t.oid::text, format_type(t.oid, NULL), t.typname, t.typcategory, COALESCE(e.typname, '')
            FROM pg_type t LEFT JOIN pg_type e ON e.oid = t.typbasetype
            WHERE t.oid = ANY($1::oid[])
            """, [ChangeLog.arrayLiteral(oids)])
        {
            guard let oid = row[0], let name = row[1], let typname = row[2], let category = row[3] else { continue }
            let base = row[4] ?? ""
            types[oid] = (name, kind(typname: base.isEmpty ? typname : base, category: category))
        }
        return columns.compactMap { column in
            guard let out = output.first(where: { $0.name == column.sourceName }) else { return nil }
            let oid = String(out.oid)
            guard oid != typeOIDs[column.sourceName], let type = types[oid] else { return column }
            return Column(
                name: column.name, sourceName: column.sourceName, typeName: column.typeName, kind: type.kind,
                sourceKind: column.sourceKind, exportType: type.name)
        }
    }

    static func kind(typname: String, category: String) -> Kind {
        switch typname {
        case "int2", "int4", "int8": return .integer
        case "bool": return .boolean
        case "float4", "float8": return .real
        case "numeric": return .numeric
        case "uuid": return .uuid
        case "timestamptz": return .timestamptz
        case "timestamp": return .timestamp
        case "date": return .date
        case "json", "jsonb": return .json
        case "bytea": return .bytea
        default: return category == "A" ? .array : .text
        }
    }

    // MARK: - SQL pieces

    /// The text form of a column as snapshots hold it (issue 2's mapping), read back by ``value(_:of:)``.
    static func output(_ column: Column, from alias: String) -> String {
        let c = column.exportType.map { "(\(alias).\(column.quoted))::\($0)" } ?? "\(alias).\(column.quoted)"
        switch column.kind {
        case .boolean: return "(\(c))::int::text"
        case .timestamptz: return "to_char(\(c) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
        case .timestamp: return "to_char(\(c), 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
        case .date: return "to_char(\(c), 'YYYY-MM-DD')"
        case .bytea: return "translate(encode(\(c), 'base64'), E'\\n', '')"
        case .array: return "array_to_json(\(c))::text"
        default: return "(\(c))::text"
        }
    }

    /// Every exported column's text form, in ``columns`` order.
    func outputs(from alias: String) -> String {
        columns.map { Self.output($0, from: alias) }.joined(separator: ", ")
    }

    /// The server row's `updated_at` in milliseconds since the epoch.
    func updatedMillis(from alias: String) -> String {
        guard let updated else { return "NULL::int8" }
        return "\(Self.millis(of: updated, from: alias))::text"
    }

    /// `column` of the row `alias` as int8 milliseconds since the epoch (the value ``updatedMillis(from:)`` prints).
    static func millis(of column: Column, from alias: String) -> String {
        "floor(extract(epoch FROM \(alias).\(column.quoted)) * 1000)::int8"
    }

    /// A bound text value (or text column of an `unnest`) cast to the column's type.
    static func input(_ column: Column, _ text: String) -> String {
        switch column.sourceKind {
        case .bytea: return "decode(\(text), 'base64')"
        case .array: return "ARRAY(SELECT jsonb_array_elements_text((\(text))::jsonb))::\(column.typeName)"
        default: return "(\(text))::\(column.typeName)"
        }
    }

    /// `jsonb_build_object('id', <typed>)`: the tombstone key, compared by PostgreSQL's own jsonb equality. Keyed
    /// by the PostgreSQL column names, so every line of a dataset finds the same tombstone.
    func keyObject(_ typed: (Column) -> String) -> String {
        "jsonb_build_object("
            + key.map { "\(SQLIdentifier.literal($0.sourceName)), \(typed($0))" }.joined(
                separator: ", ")
            + ")"
    }

    /// Turns an output text (see ``output(_:from:)``) into the JSON value the snapshot holds.
    static func value(_ text: String?, of column: Column) -> JSONValue {
        guard let text else { return .null }
        switch column.kind {
        case .integer, .boolean:
            return Int64(text).map(JSONValue.int) ?? .string(text)
        case .real:
            if let d = Double(text), d.isFinite { return .double(d) }
            return .string(text)
        default:
            return .string(text)
        }
    }

    /// Reads a row of ``outputs(from:)`` starting at `offset`.
    func row(_ values: [String?], at offset: Int) -> [String: JSONValue] {
        var out: [String: JSONValue] = [:]
        out.reserveCapacity(columns.count)
        for (i, column) in columns.enumerated() {
            out[column.name] = Self.value(values[offset + i], of: column)
        }
        return out
    }

    // MARK: - Request values

    /// Converts a request value to the text PostgreSQL parses for the column (nil is NULL), or explains in a
    /// message naming the column why it does not fit.
    static func parameter(_ value: JSONValue, for column: Column, table: String) -> Result<String?, ConversionError> {
        func bad(_ expected: String) -> Result<String?, ConversionError> {
            .failure(
                ConversionError(
                    message:
                        "column \(table).\(column.name) (\(column.typeName)) needs \(expected), got \(describe(value))")
            )
        }
        if case .string(let s) = value, s.utf8.contains(0) {
            return .failure(ConversionError(message: "column \(table).\(column.name) cannot hold a NUL character"))
        }
        switch (column.kind, value) {
        case (_, .null): return .success(nil)
        case (.integer, .int(let i)): return .success(String(i))
        case (.integer, .double(let d)) where d.rounded() == d && abs(d) < 9.2e18: return .success(String(Int64(d)))
        case (.integer, _): return bad("an integer")
        case (.boolean, .bool(let b)): return .success(b ? "true" : "false")
        case (.boolean, .int(let i)) where i == 0 || i == 1: return .success(i == 1 ? "true" : "false")
        case (.boolean, _): return bad("0, 1, true or false")
        case (.real, .int(let i)): return .success(String(i))
        case (.real, .double(let d)): return .success(String(d))
        case (.real, _): return bad("a number")
        case (.numeric, .int(let i)): return .success(String(i))
        case (.numeric, .double(let d)) where d.isFinite: return .success(String(d))
        case (.numeric, .string(let s)) where Decimal(string: s) != nil && !s.isEmpty: return .success(s)
        case (.numeric, _): return bad("a number or a decimal string")
        case (.text, .string(let s)): return .success(s)
        case (.text, .int(let i)): return .success(String(i))
        case (.text, .double(let d)): return .success(String(d))
        case (.text, _): return bad("a string")
        case (.uuid, .string(let s)) where UUID(uuidString: s) != nil: return .success(s.lowercased())
        case (.uuid, _): return bad("a UUID string")
        case (.timestamptz, .string(let s)), (.timestamp, .string(let s)):
            guard let millis = Timestamp.parseMillis(s) else {
                return bad("an ISO-8601 timestamp such as 2018-04-29T11:21:02.000Z")
            }
            return .success(Timestamp.format(unixMillis: millis))
        case (.timestamptz, _), (.timestamp, _): return bad("an ISO-8601 timestamp string")
        case (.date, .string(let s)) where isDate(s): return .success(s)
        case (.date, _): return bad("a date string YYYY-MM-DD")
        case (.json, .string(let s)) where isJSON(s): return .success(s)
        case (.json, _): return bad("a string holding JSON")
        case (.bytea, .string(let s)) where Data(base64Encoded: s) != nil: return .success(s)
        case (.bytea, _): return bad("a base64 string")
        case (.array, .string(let s)) where s.hasPrefix("[") && isJSON(s): return .success(s)
        case (.array, _): return bad("a JSON array in a string")
        }
    }

    struct ConversionError: Error { let message: String }

    static func describe(_ value: JSONValue) -> String {
        switch value {
        case .null: return "null"
        case .bool(let b): return "boolean \(b)"
        case .int(let i): return "integer \(i)"
        case .double(let d): return "number \(d)"
        case .string(let s): return "string \"\(s.count > 40 ? String(s.prefix(40)) + "…" : s)\""
        }
    }

    static func isDate(_ s: String) -> Bool {
        let b = Array(s.utf8)
        guard b.count == 10, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-") else { return false }
        return Timestamp.parseMillis(s + "T00:00:00Z") != nil
    }

    static func isJSON(_ s: String) -> Bool {
        // A parse error is the answer "not JSON", not a failure.
        (try? JSONSerialization.jsonObject(with: Data(s.utf8), options: [.fragmentsAllowed])) != nil
    }
}
