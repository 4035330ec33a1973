import CSQLite
import Crypto
import Foundation

/// A version's content digest: an order-independent hash of every published table's rows, which a device can check
/// on a database whose bytes differ from the published file (a patched one). docs/delta.md describes it.
///
/// Each row is encoded canonically: the table's name, a zero byte, then each column in table order as a tag byte
/// (0 NULL, 1 integer, 2 real, 3 text, 4 blob) followed by the value (an integer as 8 bytes big-endian, a real as its
/// IEEE-754 bits big-endian, text and blobs as an 8-byte big-endian length and their bytes). The digest is the sum,
/// modulo 2^256, of the SHA-256 of every row's encoding, read as big-endian numbers, written as 64 hex digits.
/// A sum is a multiset hash: it does not depend on row order or page layout, and a patch can move it by subtracting
/// the old rows it touches and adding the new ones.
///
/// It guards against accidents and divergence (a file that does not hold the published rows), not against tampering:
/// a patch's own SHA-256, named in the manifest, does that.
///
/// ```swift
/// let digest = try ContentDigest.compute(db, tables: ["campgrounds", "reviews"])
/// ```
public struct ContentDigest: Sendable, Equatable, CustomStringConvertible {
    /// Four 64-bit limbs, most significant first.
    private var limbs: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)

    public init() {}

    /// The digest of every row of `tables` (names sorted, so the order of the list does not matter).
    public static func compute(_ db: SQLiteConnection, tables: [String]) throws -> ContentDigest {
        var digest = ContentDigest()
        for table in Set(tables).sorted() {
            try digest.add(rowsOf: table, in: db)
        }
        return digest
    }

    /// Adds the hash of every row `SELECT * FROM table [WHERE …]` returns.
    public mutating func add(
        rowsOf table: String, in db: SQLiteConnection, where condition: String = "", _ parameters: [SQLiteValue] = []
    ) throws {
        let statement = try db.prepare("SELECT * FROM \(SQLIdentifier.quote(table)) \(condition)")
        try add(rowsOf: table, statement, parameters)
    }

    /// Adds the rows a prepared `SELECT * FROM table …` returns for `parameters` (the statement is reset first, so
    /// one statement serves many lookups).
    public mutating func add(rowsOf table: String, _ statement: SQLiteStatement, _ parameters: [SQLiteValue]) throws {
        statement.reset()
        try statement.bind(parameters)
        var encoder = RowEncoder(table: table)
        while try statement.step() {
            add(encoder.hash(statement.handle))
        }
    }

    /// Subtracts the rows a prepared `SELECT * FROM table …` returns for `parameters`.
    public mutating func subtract(rowsOf table: String, _ statement: SQLiteStatement, _ parameters: [SQLiteValue])
        throws
    {
        var removed = ContentDigest()
        try removed.add(rowsOf: table, statement, parameters)
        subtract(removed)
    }

    /// Subtracts the hash of every row the query returns (the rows a patch is about to replace).
    public mutating func subtract(
        rowsOf table: String, in db: SQLiteConnection, where condition: String = "", _ parameters: [SQLiteValue] = []
    ) throws {
        var removed = ContentDigest()
        try removed.add(rowsOf: table, in: db, where: condition, parameters)
        subtract(removed)
    }

    public var description: String {
        String(format: "%016llx%016llx%016llx%016llx", limbs.0, limbs.1, limbs.2, limbs.3)
    }

    /// Parses 64 hex digits as written by ``description``.
    public init?(hex: String) {
        // Read in place, 4 bits a digit (a manifest holds hundreds of these: a String per limb cost a publish 5 %)
        var parsed: (UInt64, UInt64, UInt64, UInt64)? = nil
        var copy = hex
        copy.withUTF8 { utf8 in
            guard utf8.count == 64 else { return }
            var limbs: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            for (index, byte) in utf8.enumerated() {
                let digit: UInt64
                switch byte {
                case 48...57: digit = UInt64(byte - 48)
                case 97...102: digit = UInt64(byte - 87)
                default: return
                }
                switch index >> 4 {
                case 0: limbs.0 = limbs.0 << 4 | digit
                case 1: limbs.1 = limbs.1 << 4 | digit
                case 2: limbs.2 = limbs.2 << 4 | digit
                default: limbs.3 = limbs.3 << 4 | digit
                }
            }
            parsed = limbs
        }
        guard let parsed else { return nil }
        limbs = parsed
    }

    public static func == (lhs: ContentDigest, rhs: ContentDigest) -> Bool {
        lhs.limbs == rhs.limbs
    }

    mutating func add(_ hash: SHA256.Digest) {
        hash.withUnsafeBytes { raw in
            add(ContentDigest(limbs: Self.limbs(raw)))
        }
    }

    public mutating func add(_ other: ContentDigest) {
        var carry: UInt64 = 0
        (limbs.3, carry) = Self.add(limbs.3, other.limbs.3, carry)
        (limbs.2, carry) = Self.add(limbs.2, other.limbs.2, carry)
        (limbs.1, carry) = Self.add(limbs.1, other.limbs.1, carry)
        (limbs.0, _) = Self.add(limbs.0, other.limbs.0, carry)
    }

    public mutating func subtract(_ other: ContentDigest) {
        // a - b = a + (2^256 - b) = a + (~b + 1) modulo 2^256
        var negated = ContentDigest(limbs: (~other.limbs.0, ~other.limbs.1, ~other.limbs.2, ~other.limbs.3))
        negated.add(ContentDigest(limbs: (0, 0, 0, 1)))
        add(negated)
    }

    private init(limbs: (UInt64, UInt64, UInt64, UInt64)) {
        self.limbs = limbs
    }

    private static func add(_ a: UInt64, _ b: UInt64, _ carry: UInt64) -> (UInt64, UInt64) {
        let (s1, o1) = a.addingReportingOverflow(b)
        let (s2, o2) = s1.addingReportingOverflow(carry)
        return (s2, (o1 ? 1 : 0) + (o2 ? 1 : 0))
    }

    private static func limbs(_ raw: UnsafeRawBufferPointer) -> (UInt64, UInt64, UInt64, UInt64) {
        func word(_ i: Int) -> UInt64 {
            var value: UInt64 = 0
            for byte in raw[(i * 8)..<(i * 8 + 8)] { value = value << 8 | UInt64(byte) }
            return value
        }
        return (word(0), word(1), word(2), word(3))
    }
}

/// Encodes the current row of a statement canonically (see ``ContentDigest``) into a reused buffer and hashes it.
private struct RowEncoder {
    private var buffer: [UInt8] = []
    private let prefix: [UInt8]

    init(table: String) {
        prefix = Array(table.utf8) + [0]
        buffer.reserveCapacity(4096)
    }

    mutating func hash(_ statement: OpaquePointer) -> SHA256.Digest {
        buffer.removeAll(keepingCapacity: true)
        buffer.append(contentsOf: prefix)
        for column in 0..<sqlite3_column_count(statement) {
            switch sqlite3_column_type(statement, column) {
            case SQLITE_INTEGER:
                buffer.append(1)
                appendBigEndian(UInt64(bitPattern: sqlite3_column_int64(statement, column)))
            case SQLITE_FLOAT:
                buffer.append(2)
                appendBigEndian(sqlite3_column_double(statement, column).bitPattern)
            case SQLITE_TEXT:
                buffer.append(3)
                let bytes = sqlite3_column_text(statement, column)
                appendBytes(UnsafeRawPointer(bytes), count: Int(sqlite3_column_bytes(statement, column)))
            case SQLITE_BLOB:
                buffer.append(4)
                let bytes = sqlite3_column_blob(statement, column)
                appendBytes(bytes, count: Int(sqlite3_column_bytes(statement, column)))
            default:
                buffer.append(0)
            }
        }
        return buffer.withUnsafeBytes { SHA256.hash(data: $0) }
    }

    private mutating func appendBigEndian(_ value: UInt64) {
        withUnsafeBytes(of: value.bigEndian) { buffer.append(contentsOf: $0) }
    }

    private mutating func appendBytes(_ pointer: UnsafeRawPointer?, count: Int) {
        appendBigEndian(UInt64(count))
        if let pointer, count > 0 {
            buffer.append(contentsOf: UnsafeRawBufferPointer(start: pointer, count: count))
        }
    }
}
