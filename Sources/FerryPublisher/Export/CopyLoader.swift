import FerryCore

/// Decodes PostgreSQL's binary COPY stream and inserts each tuple through one prepared INSERT: the hot loop.
/// Values are bound straight from libpq's buffer without copying (text and blobs never become a `String` or
/// `Array`): every parameter is rebound for every row, and the statement is reset (bindings cleared) before libpq
/// frees the buffer. Values Ferry formats itself (uuid, date, timestamp) go to a per-column scratch slot.
///
/// Binary COPY format: an 11-byte signature, a 32-bit flags field and a header extension, then per tuple a 16-bit
/// field count followed by (32-bit length, bytes) per field (length -1 is NULL); a field count of -1 ends the data.
/// Every length is checked against the message, since the bytes come from the network.
final class CopyLoader {
    private let kinds: [ColumnPlan.Kind]
    private let statement: SQLiteStatement
    private let table: String
    private let scratch: UnsafeMutablePointer<UInt8>
    private var headerSeen = false
    private(set) var finished = false
    private(set) var rows = 0
    private(set) var bytes = 0

    /// Scratch bytes per column: enough for any formatted value (the longest is a wide-year timestamp).
    static let slot = 64

    static let signature: [UInt8] = [0x50, 0x47, 0x43, 0x4F, 0x50, 0x59, 0x0A, 0xFF, 0x0D, 0x0A, 0x00]

    init(columns: [ColumnPlan], statement: SQLiteStatement, table: String) {
        kinds = columns.map(\.kind)
        self.statement = statement
        self.table = table
        scratch = .allocate(capacity: Self.slot * max(1, columns.count))
    }

    deinit { scratch.deallocate() }

    func malformed(_ what: String) -> FerryError {
        FerryError(.database, "table '\(table)': malformed binary COPY data from PostgreSQL (\(what))")
    }

    /// Consumes one CopyData message (one or more whole tuples; the first also carries the header).
    func consume(_ message: UnsafeRawBufferPointer) throws {
        guard let base = message.baseAddress else { return }
        let end = message.count
        bytes += end
        var p = 0
        if !headerSeen {
            guard end >= 19 else { throw malformed("short header") }
            for i in 0..<11 where base.load(fromByteOffset: i, as: UInt8.self) != Self.signature[i] {
                throw malformed("bad signature")
            }
            let extensionLength = Int(Int32(bitPattern: UInt32(bigEndian: base.loadUnaligned(fromByteOffset: 15, as: UInt32.self))))
            guard extensionLength >= 0, 19 + extensionLength <= end else { throw malformed("bad header extension") }
            p = 19 + extensionLength
            headerSeen = true
        }
        let columnCount = kinds.count
        while p < end {
            guard !finished else { throw malformed("data after the end marker") }
            guard p + 2 <= end else { throw malformed("truncated tuple") }
            let fieldCount = Int(Int16(bitPattern: UInt16(bigEndian: base.loadUnaligned(fromByteOffset: p, as: UInt16.self))))
            p += 2
            if fieldCount == -1 {
                finished = true
                continue
            }
            guard fieldCount == columnCount else { throw malformed("tuple has \(fieldCount) fields, expected \(columnCount)") }
            for c in 0..<columnCount {
                guard p + 4 <= end else { throw malformed("truncated field") }
                let length = Int(Int32(bitPattern: UInt32(bigEndian: base.loadUnaligned(fromByteOffset: p, as: UInt32.self))))
                p += 4
                let index = Int32(c + 1)
                if length < 0 {
                    statement.bindNull(at: index)
                    continue
                }
                guard p + length <= end else { throw malformed("field longer than its message") }
                try bind(kinds[c], base + p, length, index)
                p += length
            }
            do {
                try statement.step()
            } catch let error as FerryError {
                statement.reset()
                throw FerryError(.sqlite, "table '\(table)': cannot insert row \(rows + 1): \(error.message)"
                    + (error.message.contains("UNIQUE") ? "; the primaryKey columns are not unique in PostgreSQL's rows: fix primaryKey" : ""),
                    path: error.path)
            }
            statement.reset()
            rows += 1
        }
    }

    @inline(__always)
    private func bind(_ kind: ColumnPlan.Kind, _ value: UnsafeRawPointer, _ length: Int, _ index: Int32) throws {
        switch kind {
        case .text, .castText, .arrayJSON:
            statement.bindTextNoCopy(UnsafeRawBufferPointer(start: value, count: length), at: index)
        case .int8:
            guard length == 8 else { throw malformed("int8 of \(length) bytes") }
            statement.bindInt64(Int64(bigEndian: value.loadUnaligned(as: Int64.self)), at: index)
        case .int4:
            guard length == 4 else { throw malformed("int4 of \(length) bytes") }
            statement.bindInt64(Int64(Int32(bigEndian: value.loadUnaligned(as: Int32.self))), at: index)
        case .int2:
            guard length == 2 else { throw malformed("int2 of \(length) bytes") }
            statement.bindInt64(Int64(Int16(bigEndian: value.loadUnaligned(as: Int16.self))), at: index)
        case .oid:
            guard length == 4 else { throw malformed("oid of \(length) bytes") }
            statement.bindInt64(Int64(UInt32(bigEndian: value.loadUnaligned(as: UInt32.self))), at: index)
        case .bool:
            guard length == 1 else { throw malformed("bool of \(length) bytes") }
            statement.bindInt64(value.load(as: UInt8.self) == 0 ? 0 : 1, at: index)
        case .float8:
            guard length == 8 else { throw malformed("float8 of \(length) bytes") }
            statement.bindDouble(Double(bitPattern: UInt64(bigEndian: value.loadUnaligned(as: UInt64.self))), at: index)
        case .float4:
            guard length == 4 else { throw malformed("float4 of \(length) bytes") }
            statement.bindDouble(Double(Float(bitPattern: UInt32(bigEndian: value.loadUnaligned(as: UInt32.self)))), at: index)
        case .bytea:
            statement.bindBlobNoCopy(UnsafeRawBufferPointer(start: value, count: length), at: index)
        case .jsonb:
            // jsonb's binary form is a version byte (1) followed by the JSON text.
            guard length >= 1, value.load(as: UInt8.self) == 1 else { throw malformed("unknown jsonb version") }
            statement.bindTextNoCopy(UnsafeRawBufferPointer(start: value + 1, count: length - 1), at: index)
        case .uuid:
            guard length == 16 else { throw malformed("uuid of \(length) bytes") }
            let out = scratch + Self.slot * Int(index - 1)
            let n = BinaryFormat.uuid(value, into: out)
            statement.bindTextNoCopy(UnsafeRawBufferPointer(start: out, count: n), at: index)
        case .date:
            guard length == 4 else { throw malformed("date of \(length) bytes") }
            let out = scratch + Self.slot * Int(index - 1)
            let n = BinaryFormat.date(Int32(bigEndian: value.loadUnaligned(as: Int32.self)), into: out)
            statement.bindTextNoCopy(UnsafeRawBufferPointer(start: out, count: n), at: index)
        case .timestamp:
            guard length == 8 else { throw malformed("timestamp of \(length) bytes") }
            let out = scratch + Self.slot * Int(index - 1)
            let n = BinaryFormat.timestamp(Int64(bigEndian: value.loadUnaligned(as: Int64.self)), into: out)
            statement.bindTextNoCopy(UnsafeRawBufferPointer(start: out, count: n), at: index)
        }
    }
}
