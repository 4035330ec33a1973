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
    /// What happens to each decoded tuple.
    enum Target {
        /// Inserted through the prepared INSERT (a snapshot built from scratch).
        case insert(SQLiteStatement)
        /// Compared with the previous version's row index and written to its copy only when new or changed.
        case diff(TableDiff)
    }

    private let kinds: [ColumnPlan.Kind]
    private let target: Target
    private let table: String
    private let scratch: UnsafeMutablePointer<UInt8>
    /// Each field of the tuple being handled: its offset in the message (-1 for NULL) and length.
    private let offsets: UnsafeMutablePointer<Int>
    private let lengths: UnsafeMutablePointer<Int>
    /// The primary-key columns (positions in the tuple), for the row index.
    private let keyColumns: [Int]
    private var keyBuffer: [UInt8] = []
    /// Receives (key hash, row hash, rowid) for every row, in COPY order (the next version's row index).
    private let index: RowIndexWriter?
    private var headerSeen = false
    private(set) var finished = false
    private(set) var rows = 0
    private(set) var bytes = 0

    /// Scratch bytes per column: enough for any formatted value (the longest is a wide-year timestamp).
    static let slot = 64

    static let signature: [UInt8] = [0x50, 0x47, 0x43, 0x4F, 0x50, 0x59, 0x0A, 0xFF, 0x0D, 0x0A, 0x00]

    init(columns: [ColumnPlan], target: Target, table: String, keyColumns: [Int] = [], index: RowIndexWriter? = nil) {
        kinds = columns.map(\.kind)
        self.target = target
        self.table = table
        self.keyColumns = keyColumns
        self.index = index
        scratch = .allocate(capacity: Self.slot * max(1, columns.count))
        offsets = .allocate(capacity: max(1, columns.count))
        lengths = .allocate(capacity: max(1, columns.count))
    }

    deinit {
        scratch.deallocate()
        offsets.deallocate()
        lengths.deallocate()
    }

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
            let extensionLength = Int(
                Int32(bitPattern: UInt32(bigEndian: base.loadUnaligned(fromByteOffset: 15, as: UInt32.self))))
            guard extensionLength >= 0, 19 + extensionLength <= end else { throw malformed("bad header extension") }
            p = 19 + extensionLength
            headerSeen = true
        }
        let columnCount = kinds.count
        while p < end {
            guard !finished else { throw malformed("data after the end marker") }
            guard p + 2 <= end else { throw malformed("truncated tuple") }
            let tupleStart = p
            let fieldCount = Int(
                Int16(bitPattern: UInt16(bigEndian: base.loadUnaligned(fromByteOffset: p, as: UInt16.self))))
            p += 2
            if fieldCount == -1 {
                finished = true
                continue
            }
            guard fieldCount == columnCount else {
                throw malformed("tuple has \(fieldCount) fields, expected \(columnCount)")
            }
            p = try readFields(base, p, end)
            let tuple = UnsafeRawBufferPointer(start: base + tupleStart, count: p - tupleStart)
            switch target {
            case .insert(let statement):
                try bindFields(base, to: statement)
                do {
                    try statement.step()
                } catch let error as FerryError {
                    statement.reset()
                    throw FerryError(
                        .sqlite,
                        "table '\(table)': cannot insert row \(rows + 1): \(error.message)"
                            + (error.message.contains("UNIQUE")
                                ? "; the primaryKey columns are not unique in PostgreSQL's rows: fix primaryKey" : ""),
                        path: error.path)
                }
                statement.reset()
                if let index {
                    try index.append(
                        key: keyHash(base, index.hasher), row: index.hasher.hash(tuple),
                        rowid: statement.connection.lastInsertRowID)
                }
            case .diff(let diff):
                let key = keyHash(base, diff.hasher)
                let row = diff.hasher.hash(tuple)
                // nil: an insert waiting for the copy; its entry is written when it is applied.
                if let rowid = try diff.handle(key: key, row: row, tuple: tuple, loader: self) {
                    try index?.append(key: key, row: row, rowid: rowid)
                }
            }
            rows += 1
        }
    }

    /// Reads the fields of the tuple whose field count ended at `start` into `offsets` and `lengths`; returns where
    /// the tuple ends.
    @inline(__always)
    private func readFields(_ base: UnsafeRawPointer, _ start: Int, _ end: Int) throws -> Int {
        var p = start
        for c in 0..<kinds.count {
            guard p + 4 <= end else { throw malformed("truncated field") }
            let length = Int(
                Int32(bitPattern: UInt32(bigEndian: base.loadUnaligned(fromByteOffset: p, as: UInt32.self))))
            p += 4
            if length < 0 {
                offsets[c] = -1
                lengths[c] = 0
                continue
            }
            guard p + length <= end else { throw malformed("field longer than its message") }
            offsets[c] = p
            lengths[c] = length
            p += length
        }
        return p
    }

    /// Binds the fields of one whole tuple (as ``consume(_:)`` saw it: field count, then the fields) to
    /// parameters 1…n of `statement`.
    func bind(tuple: UnsafeRawBufferPointer, to statement: SQLiteStatement) throws {
        guard let base = tuple.baseAddress, tuple.count >= 2,
            Int(Int16(bitPattern: UInt16(bigEndian: base.loadUnaligned(as: UInt16.self)))) == kinds.count,
            try readFields(base, 2, tuple.count) == tuple.count
        else { throw malformed("a kept tuple does not parse") }
        try bindFields(base, to: statement)
    }

    /// The key hash of the tuple whose fields were just read: each primary-key field as (length, bytes).
    @inline(__always)
    private func keyHash(_ base: UnsafeRawPointer, _ hasher: RowHasher) -> UInt64 {
        if keyColumns.count == 1 {
            let c = keyColumns[0]
            // The field's bytes with their 4-byte length in front, exactly as in the tuple.
            let start = offsets[c] < 0 ? nil : base + offsets[c] - 4
            return hasher.hash(UnsafeRawBufferPointer(start: start, count: start == nil ? 0 : lengths[c] + 4))
        }
        keyBuffer.removeAll(keepingCapacity: true)
        for c in keyColumns {
            let length = offsets[c] < 0 ? -1 : lengths[c]
            withUnsafeBytes(of: Int32(length).bigEndian) { keyBuffer.append(contentsOf: $0) }
            if length > 0 {
                keyBuffer.append(contentsOf: UnsafeRawBufferPointer(start: base + offsets[c], count: length))
            }
        }
        return keyBuffer.withUnsafeBytes { hasher.hash($0) }
    }

    /// Binds every field of the tuple just read to parameters 1…n of `statement`.
    @inline(__always)
    private func bindFields(_ base: UnsafeRawPointer, to statement: SQLiteStatement) throws {
        for c in 0..<kinds.count {
            let index = Int32(c + 1)
            if offsets[c] < 0 {
                statement.bindNull(at: index)
            } else {
                try bind(kinds[c], base + offsets[c], lengths[c], index, statement)
            }
        }
    }

    @inline(__always)
    private func bind(
        _ kind: ColumnPlan.Kind, _ value: UnsafeRawPointer, _ length: Int, _ index: Int32, _ statement: SQLiteStatement
    ) throws {
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
            statement.bindDouble(
                Double(Float(bitPattern: UInt32(bigEndian: value.loadUnaligned(as: UInt32.self)))), at: index)
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
