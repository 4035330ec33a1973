import Crypto
import FerryCore
import Foundation

/// Streams a row index to a temporary file, table by table; ``finish()`` adds the header.
final class RowIndexWriter {
    let url: URL
    let hasher: RowHasher
    private let handle: FileHandle
    private let buffer: UnsafeMutableRawBufferPointer
    private var used = 0
    private var segments: [RowIndex.Segment] = []
    /// Where each finished segment starts in the file, by table.
    private var starts: [String: UInt64] = [:]
    private var written: UInt64 = 0
    private var current: (name: String, count: Int, hash: SHA256)?
    private let plans: String

    init(url: URL, plans: String, hasher: RowHasher) throws {
        self.url = url
        self.plans = plans
        self.hasher = hasher
        // a leftover of an interrupted run, if any; createFile reports a real problem
        try? FileManager.default.removeItem(at: url)
        guard FileManager.default.createFile(atPath: url.path, contents: nil),
            let handle = FileHandle(forUpdatingAtPath: url.path)
        else {
            throw FerryError(.io, "cannot create the row index", path: url.path)
        }
        self.handle = handle
        buffer = .allocate(byteCount: RowIndex.entrySize * 8192, alignment: 8)
    }

    deinit {
        try? handle.close()  // closed already after finish(); otherwise the file is abandoned (tmp/ is cleared)
        buffer.deallocate()
    }

    func beginTable(_ name: String) {
        current = (name, 0, SHA256())
        starts[name] = written + UInt64(used)
    }

    /// The entries of the current table so far: the position the next ``append(key:row:rowid:)`` writes.
    var tableCount: Int { current?.count ?? 0 }

    @inline(__always)
    func append(key: UInt64, row: UInt64, rowid: Int64) throws {
        buffer.storeBytes(of: key.littleEndian, toByteOffset: used, as: UInt64.self)
        buffer.storeBytes(of: row.littleEndian, toByteOffset: used + 8, as: UInt64.self)
        buffer.storeBytes(of: rowid.littleEndian, toByteOffset: used + 16, as: Int64.self)
        used += RowIndex.entrySize
        current?.count += 1
        if used == buffer.count { try flush() }
    }

    func endTable() throws {
        try flush()
        guard let table = current else { return }
        segments.append(RowIndex.Segment(name: table.name, count: table.count, sha256: table.hash.finalize().hex))
        current = nil
    }

    /// Writes the header and trailer. Not fsynced: the index is derived data, checked against its checksums when
    /// read, so one a crash tore only makes the next publish build from scratch; its fsync (48 MB for 2M rows)
    /// would sit on every publish's critical path.
    ///
    /// `rowids` replaces the rowids of entries already written (by table, the entry's position in its table): rows
    /// a step inserted get their rowids only when the step is applied (``IncrementalBuild``). Each segment changed
    /// so is read back for its checksum.
    func finish(rowids: [String: [(entry: Int, rowid: Int64)]] = [:]) throws {
        try endTable()
        do {
            for (table, changes) in rowids where !changes.isEmpty {
                try rewrite(table, changes)
            }
            try handle.seekToEnd()
        } catch let error as FerryError {
            throw error
        } catch {
            throw FerryError(.io, "cannot update the row index: \(error.localizedDescription)", path: url.path)
        }
        let header = try JSONEncoder().encode(RowIndex.Header(key: hasher.hex, plans: plans, tables: segments))
        var tail = [UInt8](header)
        withUnsafeBytes(of: UInt32(header.count).littleEndian) { tail.append(contentsOf: $0) }
        tail.append(contentsOf: RowIndex.magic)
        do {
            try handle.write(contentsOf: tail)
            try handle.close()
        } catch {
            throw FerryError(.io, "cannot write the row index: \(error.localizedDescription)", path: url.path)
        }
    }

    /// Writes `changes`' rowids into `table`'s segment, then hashes the segment again.
    private func rewrite(_ table: String, _ changes: [(entry: Int, rowid: Int64)]) throws {
        guard let position = segments.firstIndex(where: { $0.name == table }), let start = starts[table] else {
            throw FerryError(.io, "the row index has no table '\(table)' to update", path: url.path)
        }
        let count = segments[position].count
        for change in changes {
            guard change.entry >= 0, change.entry < count else {
                throw FerryError(
                    .io, "table '\(table)': entry \(change.entry) is outside its \(count) entries", path: url.path)
            }
            try handle.seek(toOffset: start + UInt64(change.entry * RowIndex.entrySize + 16))
            try withUnsafeBytes(of: change.rowid.littleEndian) { try handle.write(contentsOf: Data($0)) }
        }
        try handle.seek(toOffset: start)
        var hash = SHA256()
        var left = count * RowIndex.entrySize
        while left > 0 {
            guard let chunk = try handle.read(upToCount: min(left, 1 << 20)), !chunk.isEmpty else {
                throw FerryError(.io, "table '\(table)': the row index ended early", path: url.path)
            }
            hash.update(data: chunk)
            left -= chunk.count
        }
        segments[position].sha256 = hash.finalize().hex
    }

    private func flush() throws {
        guard used > 0 else { return }
        let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<used])
        current?.hash.update(bufferPointer: bytes)
        do {
            try handle.write(
                contentsOf: Data(
                    bytesNoCopy: UnsafeMutableRawPointer(mutating: bytes.baseAddress!), count: used, deallocator: .none)
            )
        } catch {
            throw FerryError(.io, "cannot write the row index: \(error.localizedDescription)", path: url.path)
        }
        written += UInt64(used)
        used = 0
    }
}
