import Crypto
import FerryCore
import Foundation

/// The publisher's row index of one stored snapshot (`objects/<sha256>.rows`): per table, for every row, a hash of
/// its primary key as PostgreSQL sent it, a hash of the whole COPY tuple, and the row's rowid in the snapshot. The
/// next publish of the scope streams PostgreSQL's rows past it, so it knows which rows are new, changed or gone
/// without loading a single unchanged row into SQLite (``IncrementalBuild``). It is a cache: a missing, corrupt or
/// outdated index only means the next publish builds its file from scratch.
///
/// Layout: the table segments, each `count` entries of 24 bytes (key hash, row hash, rowid; little-endian 64-bit),
/// then a JSON ``Header`` naming each segment's table, count and SHA-256, then the header's length (32-bit
/// little-endian) and the magic `FERRYRX1`. The header comes last because the writer learns the counts as it
/// streams. The hashes are 64 bits: a row whose new bytes hash like its old ones would go
/// unnoticed; the hashes are SipHash-1-3 under the index's own random key (``RowHasher``), so that takes knowing the
/// key, not an accident or a crafted row.
enum RowIndex {
    static let magic = Array("FERRYRX1".utf8)
    static let entrySize = 24

    struct Header: Codable, Equatable {
        var format = 1
        /// The ``RowHasher`` key, 32 hex digits.
        var key: String
        /// ``SnapshotExporter/planDigest(plans:schemaDDL:)`` of the export that wrote the snapshot: a publish reuses
        /// the snapshot only when its own is equal.
        var plans: String
        var tables: [Segment]
    }

    struct Segment: Codable, Equatable {
        var name: String
        var count: Int
        var sha256: String
    }

    /// Reads a little-endian UInt64 at `offset`.
    @inline(__always)
    static func load64(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt64 {
        UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }
}

/// SipHash-1-3 (the keyed hash Swift's and Rust's hash tables use) with a 128-bit key: a fast pseudorandom
/// function, so without the key nobody can make a changed row hash like its old value. Each row index has its own
/// random key, kept in its header and reused by the indexes built from it.
struct RowHasher: Equatable {
    let k0: UInt64
    let k1: UInt64

    /// A fresh random key.
    init() {
        var generator = SystemRandomNumberGenerator()
        k0 = generator.next()
        k1 = generator.next()
    }

    init(k0: UInt64, k1: UInt64) {
        self.k0 = k0
        self.k1 = k1
    }

    /// The key as 32 hex digits, for the header.
    var hex: String { String(format: "%016llx%016llx", k0, k1) }

    init?(hex: String) {
        guard hex.utf8.count == 32, let a = UInt64(hex.prefix(16), radix: 16), let b = UInt64(hex.suffix(16), radix: 16)
        else { return nil }
        self.init(k0: a, k1: b)
    }

    @inline(__always)
    func hash(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var v0 = k0 ^ 0x736f_6d65_7073_6575
        var v1 = k1 ^ 0x646f_7261_6e64_6f6d
        var v2 = k0 ^ 0x6c79_6765_6e65_7261
        var v3 = k1 ^ 0x7465_6462_7974_6573
        let count = bytes.count
        var i = 0
        if let base = bytes.baseAddress {
            while i + 8 <= count {
                let m = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: i, as: UInt64.self))
                v3 ^= m
                Self.round(&v0, &v1, &v2, &v3)
                v0 ^= m
                i += 8
            }
        }
        var last = UInt64(truncatingIfNeeded: count) << 56
        var shift: UInt64 = 0
        while i < count {
            last |= UInt64(bytes.baseAddress!.load(fromByteOffset: i, as: UInt8.self)) << shift
            shift += 8
            i += 1
        }
        v3 ^= last
        Self.round(&v0, &v1, &v2, &v3)
        v0 ^= last
        v2 ^= 0xff
        Self.round(&v0, &v1, &v2, &v3)
        Self.round(&v0, &v1, &v2, &v3)
        Self.round(&v0, &v1, &v2, &v3)
        return v0 ^ v1 ^ v2 ^ v3
    }

    @inline(__always)
    private static func round(_ v0: inout UInt64, _ v1: inout UInt64, _ v2: inout UInt64, _ v3: inout UInt64) {
        v0 &+= v1
        v1 = v1.rotated(13)
        v1 ^= v0
        v0 = v0.rotated(32)
        v2 &+= v3
        v3 = v3.rotated(16)
        v3 ^= v2
        v0 &+= v3
        v3 = v3.rotated(21)
        v3 ^= v0
        v2 &+= v1
        v1 = v1.rotated(17)
        v1 ^= v2
        v2 = v2.rotated(32)
    }
}

extension UInt64 {
    @inline(__always)
    fileprivate func rotated(_ n: UInt64) -> UInt64 { (self << n) | (self >> (64 - n)) }
}

/// Why a stored row index cannot be used; the publish then builds from scratch.
struct RowIndexUnusable: Error, CustomStringConvertible {
    let description: String
}

/// A stored row index, opened and checked; ``table(_:)`` reads one table's entries into a lookup table.
struct RowIndexReader {
    let url: URL
    let header: RowIndex.Header
    let hasher: RowHasher
    private let offsets: [String: (offset: Int, segment: RowIndex.Segment)]

    init(url: URL) throws {
        self.url = url
        do {
            let handle = try FileHandle(forReadingFrom: url)
            defer { try? handle.close() }  // read-only: closing cannot lose anything
            let size = Int(try handle.seekToEnd())
            guard size >= 12 else {
                throw RowIndexUnusable(description: "row index \(url.lastPathComponent) is truncated")
            }
            try handle.seek(toOffset: UInt64(size - 12))
            let trailer = [UInt8](try handle.read(upToCount: 12) ?? Data())
            guard trailer.count == 12, Array(trailer[4...]) == RowIndex.magic else {
                throw RowIndexUnusable(description: "row index \(url.lastPathComponent) has no trailer")
            }
            let headerLength = Int(
                UInt32(trailer[0]) | UInt32(trailer[1]) << 8 | UInt32(trailer[2]) << 16 | UInt32(trailer[3]) << 24)
            guard headerLength <= size - 12 else {
                throw RowIndexUnusable(description: "row index \(url.lastPathComponent) has a bad header length")
            }
            try handle.seek(toOffset: UInt64(size - 12 - headerLength))
            let headerData = try handle.read(upToCount: headerLength) ?? Data()
            let header: RowIndex.Header
            do { header = try JSONDecoder().decode(RowIndex.Header.self, from: headerData) } catch {
                throw RowIndexUnusable(
                    description: "row index \(url.lastPathComponent) has an unreadable header: \(error)")
            }
            guard header.format == 1, let hasher = RowHasher(hex: header.key) else {
                throw RowIndexUnusable(
                    description: "row index \(url.lastPathComponent) has format \(header.format) or a bad key")
            }
            var offsets: [String: (Int, RowIndex.Segment)] = [:]
            var offset = 0
            for segment in header.tables {
                guard segment.count >= 0, segment.count <= Int(Int32.max), offsets[segment.name] == nil else {
                    throw RowIndexUnusable(
                        description: "row index \(url.lastPathComponent) has a bad segment for '\(segment.name)'")
                }
                offsets[segment.name] = (offset, segment)
                offset += segment.count * RowIndex.entrySize
            }
            guard offset == size - 12 - headerLength else {
                throw RowIndexUnusable(
                    description:
                        "row index \(url.lastPathComponent) is \(size) bytes, its header describes \(offset + 12 + headerLength)"
                )
            }
            self.header = header
            self.hasher = hasher
            self.offsets = offsets
        } catch let error as RowIndexUnusable {
            throw error
        } catch {
            throw RowIndexUnusable(
                description: "cannot read row index \(url.lastPathComponent): \(error.localizedDescription)")
        }
    }

    /// One table's entries with a hash lookup by key; nil when the index has no such table.
    func table(_ name: String) throws -> IndexedTable? {
        guard let (offset, segment) = offsets[name] else { return nil }
        do {
            let handle = try FileHandle(forReadingFrom: url)
            defer { try? handle.close() }  // read-only: closing cannot lose anything
            try handle.seek(toOffset: UInt64(offset))
            let table = IndexedTable(name: name, count: segment.count)
            var checksum = SHA256()
            var read = 0
            let total = segment.count * RowIndex.entrySize
            while read < total {
                let chunk = try handle.read(upToCount: min(total - read, RowIndex.entrySize * 65536)) ?? Data()
                guard !chunk.isEmpty else { break }
                checksum.update(data: chunk)
                try chunk.withUnsafeBytes { try table.append(entries: $0, first: read / RowIndex.entrySize) }
                read += chunk.count
            }
            guard read == total, checksum.finalize().hex == segment.sha256 else {
                throw RowIndexUnusable(
                    description: "row index \(url.lastPathComponent): table '\(name)' does not match its checksum")
            }
            return table
        } catch let error as RowIndexUnusable {
            throw error
        } catch {
            throw RowIndexUnusable(
                description: "cannot read row index \(url.lastPathComponent): \(error.localizedDescription)")
        }
    }
}

/// One table of an old row index, in the order its rows came from PostgreSQL, which is the order the new rows come
/// in too (both are `ORDER BY` the key): a row is first looked for where the last one was found, so a publish that
/// changed values but added and removed few rows reads the index front to back. Only when that guess misses (a row
/// added, or rows removed before it) is the key looked up by hash (open addressing, linear probing), in a table
/// built at the first miss. Raw storage: the hot loop of an incremental export runs here for every row.
final class IndexedTable {
    let name: String
    let count: Int
    let keys: UnsafeMutableBufferPointer<UInt64>
    let rows: UnsafeMutableBufferPointer<UInt64>
    let rowids: UnsafeMutableBufferPointer<Int64>
    let seen: UnsafeMutableBufferPointer<Bool>
    private var slots: UnsafeMutableBufferPointer<Int32>?
    private var mask = 0
    /// Where the next row is expected.
    private var cursor = 0

    init(name: String, count: Int) {
        self.name = name
        self.count = count
        keys = .allocate(capacity: max(1, count))
        rows = .allocate(capacity: max(1, count))
        rowids = .allocate(capacity: max(1, count))
        seen = .allocate(capacity: max(1, count))
        seen.initialize(repeating: false)
    }

    deinit {
        keys.deallocate()
        rows.deallocate()
        rowids.deallocate()
        seen.deallocate()
        slots?.deallocate()
    }

    /// Adds whole entries (a multiple of 24 bytes) as entries `first`, `first + 1`, ….
    func append(entries: UnsafeRawBufferPointer, first: Int) throws {
        guard entries.count % RowIndex.entrySize == 0, first + entries.count / RowIndex.entrySize <= count else {
            throw RowIndexUnusable(description: "table '\(name)': a torn entry in the row index")
        }
        for j in 0..<(entries.count / RowIndex.entrySize) {
            let base = j * RowIndex.entrySize
            keys[first + j] = RowIndex.load64(entries, base)
            rows[first + j] = RowIndex.load64(entries, base + 8)
            rowids[first + j] = Int64(bitPattern: RowIndex.load64(entries, base + 16))
        }
    }

    /// The entry holding `key`, or nil; the entry found is marked seen. Throws when it was seen already (two new
    /// rows share a key hash) or when two old keys share one.
    @inline(__always)
    func take(_ key: UInt64) throws -> Int? {
        var entry = cursor < count && keys[cursor] == key ? cursor : -1
        if entry < 0 {
            guard let found = try lookUp(key) else { return nil }
            entry = found
        }
        guard !seen[entry] else { throw RowIndexUnusable(description: "table '\(name)': two rows share a key hash") }
        seen[entry] = true
        cursor = entry + 1
        return entry
    }

    private func lookUp(_ key: UInt64) throws -> Int? {
        let slots = try self.slots ?? buildSlots()
        var slot = Int(truncatingIfNeeded: key) & mask
        while true {
            let entry = Int(slots[slot])
            if entry == 0 { return nil }
            if keys[entry - 1] == key { return entry - 1 }
            slot = (slot + 1) & mask
        }
    }

    private func buildSlots() throws -> UnsafeMutableBufferPointer<Int32> {
        var capacity = 16
        while capacity < count * 2 { capacity <<= 1 }
        let slots = UnsafeMutableBufferPointer<Int32>.allocate(capacity: capacity)
        slots.initialize(repeating: 0)
        self.slots = slots
        mask = capacity - 1
        for i in 0..<count {
            let key = keys[i]
            var slot = Int(truncatingIfNeeded: key) & mask
            while slots[slot] != 0 {
                guard keys[Int(slots[slot]) - 1] != key else {
                    throw RowIndexUnusable(description: "table '\(name)': two keys share a hash in the row index")
                }
                slot = (slot + 1) & mask
            }
            slots[slot] = Int32(i + 1)
        }
        return slots
    }
}
