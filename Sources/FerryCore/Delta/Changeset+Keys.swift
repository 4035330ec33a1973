import CSQLite
import Foundation

extension Changeset {
    /// The rows a changeset touches in one table: which columns form the primary key (by position in the table) and
    /// the key of each touched row, in changeset order.
    public struct TouchedRows: Sendable, Equatable {
        public var primaryKey: [Int32]
        public var keys: [[SQLiteValue]]
    }

    /// The primary keys of every row the changeset inserts, updates or deletes, per table. A key is read from the
    /// new values of an insert and the old values of an update or delete (a changeset never changes a key in place).
    public func touchedRows() throws -> [String: TouchedRows] {
        var result: [String: TouchedRows] = [:]
        try forEachChange { iterator, table, _, op in
            var flags: UnsafeMutablePointer<UInt8>?
            var flagCount: Int32 = 0
            guard sqlite3changeset_pk(iterator, &flags, &flagCount) == SQLITE_OK, let flags else {
                throw FerryError(.verification, "the changeset is malformed: a change cannot be read")
            }
            let primaryKey = (0..<flagCount).filter { flags[Int($0)] != 0 }
            var key: [SQLiteValue] = []
            for column in primaryKey {
                var value: OpaquePointer?
                let read =
                    op == SQLITE_INSERT
                    ? sqlite3changeset_new(iterator, column, &value) : sqlite3changeset_old(iterator, column, &value)
                guard read == SQLITE_OK, let value else {
                    throw FerryError(.verification, "the changeset is malformed: a change has no primary key value")
                }
                key.append(Self.swiftValue(value))
            }
            result[table, default: TouchedRows(primaryKey: primaryKey, keys: [])].keys.append(key)
        }
        return result
    }

    /// Calls `body` with each change of the changeset in order: SQLite's iterator (valid during the call), the
    /// table, its column count and the operation (`SQLITE_INSERT`, `SQLITE_UPDATE`, `SQLITE_DELETE`). Throws a
    /// verification error for a malformed changeset, and `body`'s error.
    private func forEachChange(
        _ body: (_ iterator: OpaquePointer, _ table: String, _ columns: Int32, _ op: Int32) throws -> Void
    ) throws {
        guard !isEmpty else { return }
        var copy = data
        try copy.withUnsafeMutableBytes { raw in
            var iterator: OpaquePointer?
            guard sqlite3changeset_start(&iterator, Int32(raw.count), raw.baseAddress) == SQLITE_OK, let iterator else {
                throw FerryError(.verification, "the changeset is malformed: it cannot be read")
            }
            var rc = sqlite3changeset_next(iterator)
            while rc == SQLITE_ROW {
                var table: UnsafePointer<CChar>?
                var columns: Int32 = 0
                var op: Int32 = 0
                var indirect: Int32 = 0
                guard sqlite3changeset_op(iterator, &table, &columns, &op, &indirect) == SQLITE_OK, let table else {
                    sqlite3changeset_finalize(iterator)
                    throw FerryError(.verification, "the changeset is malformed: a change cannot be read")
                }
                do {
                    try body(iterator, String(cString: table), columns, op)
                } catch {
                    sqlite3changeset_finalize(iterator)
                    throw error
                }
                rc = sqlite3changeset_next(iterator)
            }
            let finalized = sqlite3changeset_finalize(iterator)
            guard rc == SQLITE_DONE, finalized == SQLITE_OK else {
                throw FerryError(
                    .verification, "the changeset is malformed (SQLite error \(rc == SQLITE_DONE ? finalized : rc))")
            }
        }
    }

    fileprivate static func swiftValue(_ value: OpaquePointer) -> SQLiteValue {
        switch sqlite3_value_type(value) {
        case SQLITE_INTEGER: return .integer(sqlite3_value_int64(value))
        case SQLITE_FLOAT: return .real(sqlite3_value_double(value))
        case SQLITE_TEXT:
            let count = Int(sqlite3_value_bytes(value))
            guard let p = sqlite3_value_text(value) else { return .text("") }
            return .text(String(decoding: UnsafeBufferPointer(start: p, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_value_bytes(value))
            guard let p = sqlite3_value_blob(value) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: p, count: count)))
        default: return .null
        }
    }
}

extension ContentDigest {
    /// The digest of the rows of `db` with the `touched` keys (rows that do not exist add nothing): what a patch
    /// removes when read before it is applied, and what it adds when read after. One indexed lookup per key.
    public static func of(_ touched: [String: Changeset.TouchedRows], in db: SQLiteConnection) throws -> ContentDigest {
        var digest = ContentDigest()
        for (table, rows) in touched.sorted(by: { $0.key < $1.key }) {
            let names = try db.query("SELECT name FROM pragma_table_info(?) ORDER BY cid", [.text(table)]).compactMap {
                $0.first?.text
            }
            let keyColumns = try rows.primaryKey.map { index -> String in
                guard Int(index) < names.count else {
                    throw FerryError(
                        .verification, "the patch's table '\(table)' has more columns than the database's",
                        path: db.path)
                }
                return SQLIdentifier.quote(names[Int(index)])
            }
            let condition = "WHERE " + keyColumns.map { "\($0) = ?" }.joined(separator: " AND ")
            let lookup = try db.prepare("SELECT * FROM \(SQLIdentifier.quote(table)) \(condition)")
            for key in Set(rows.keys) {
                try digest.add(rowsOf: table, lookup, key)
            }
        }
        return digest
    }
}

extension Changeset {
    /// The text values this changeset writes into the given columns (by position in their table): the new values
    /// of each insert, and of each update that changes such a column. What a step adds to the attachments a scope
    /// names (`AttachmentNames` in FerryStore). A NULL or a value of another type adds nothing.
    ///
    /// ```swift
    /// let named = try step.newTextValues(in: ["photos": [2]])   // the SHA-256s written into photos' third column
    /// ```
    public func newTextValues(in columns: [String: [Int32]]) throws -> Set<String> {
        guard !columns.isEmpty else { return [] }
        var result: Set<String> = []
        try forEachChange { iterator, table, count, op in
            guard op != SQLITE_DELETE, let positions = columns[table] else { return }
            for position in positions where position >= 0 && position < count {
                var value: OpaquePointer?
                // An update carries no new value for a column it leaves as it was (value stays nil).
                if sqlite3changeset_new(iterator, position, &value) == SQLITE_OK, let value,
                    case .text(let text) = Self.swiftValue(value)
                {
                    result.insert(text)
                }
            }
        }
        return result
    }
}
