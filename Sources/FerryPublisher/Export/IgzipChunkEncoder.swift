import CISAL
import FerryCore
import FerryStore
import Foundation

extension Gzip.ChunkEncoding {
    /// ISA-L's igzip at `level` (0 fastest … 3 smallest): the publisher's deflate for the stored gzip copy.
    ///
    /// Measured on the 654 MB snapshot of `scripts/bench publish` (one core, 1 MiB chunks primed with 32 KiB as
    /// the publisher deflates them): level 2 ran at 403 MB/s to 37.5 % of the input, level 1 at 439 MB/s to 37.9 %,
    /// zlib's level 1 at 120 MB/s to 36.5 %. Deflating was most of a publish's CPU; igzip makes it a fraction.
    ///
    /// ```swift
    /// let prepared = try FileSnapshotStore.PreparedObject(file: tmpFile, encoding: .igzip(level: 2))
    /// ```
    public static func igzip(level: Int) -> Gzip.ChunkEncoding {
        let level = UInt32(min(3, max(0, level)))
        return Gzip.ChunkEncoding(extraFlags: level <= 1 ? 4 : 0) { try IgzipChunkEncoder(level: level) }
    }
}

/// igzip's stateful deflate, reset for each chunk: raw deflate data primed with the dictionary, ended by a sync
/// flush (igzip's byte-aligning empty stored block, as zlib's) or, for the last chunk, by the final block.
final class IgzipChunkEncoder: GzipChunkEncoder {
    /// 82 KB: zero-filled on the heap, never built as a Swift value (which could put it on a thread's stack).
    private let stream: UnsafeMutablePointer<isal_zstream> = {
        let raw = UnsafeMutableRawPointer.allocate(
            byteCount: MemoryLayout<isal_zstream>.size, alignment: MemoryLayout<isal_zstream>.alignment)
        raw.initializeMemory(as: UInt8.self, repeating: 0, count: MemoryLayout<isal_zstream>.size)
        return raw.bindMemory(to: isal_zstream.self, capacity: 1)
    }()
    private let levelBuffer: UnsafeMutableRawBufferPointer
    private var output = GzipChunkOutput()
    /// Whether the output buffer starts at the bound below (always, except in the test of its growing).
    private let reserveBound: Bool

    /// `reserveBound: false` starts every chunk's output in whatever buffer there is, down to none, so a test can
    /// make igzip run out of room mid-chunk.
    init(level: UInt32, reserveBound: Bool = true) throws {
        self.reserveBound = reserveBound
        let size = Int(ferry_isal_level_buffer_size(level))
        levelBuffer = .allocate(byteCount: max(size, 1), alignment: 64)
        isal_deflate_init(stream)
        stream.pointee.level = level
        stream.pointee.level_buf = size == 0 ? nil : levelBuffer.baseAddress!.assumingMemoryBound(to: UInt8.self)
        stream.pointee.level_buf_size = UInt32(size)
        stream.pointee.gzip_flag = UInt16(IGZIP_DEFLATE)
    }

    deinit {
        stream.deallocate()
        levelBuffer.deallocate()
    }

    func encode(_ input: UnsafeRawBufferPointer, dictionary: UnsafeRawBufferPointer, last: Bool, path: String) throws
        -> Data
    {
        // Reset keeps the level, its buffer and the wrapper; it clears the history, the flush and end_of_stream.
        isal_deflate_reset(stream)
        if !dictionary.isEmpty {
            let rc = isal_deflate_set_dict(
                stream, UnsafeMutablePointer(mutating: dictionary.baseAddress!.assumingMemoryBound(to: UInt8.self)),
                UInt32(dictionary.count))
            guard rc == COMP_OK else { throw FerryError(.io, "igzip could not set the dictionary (\(rc))", path: path) }
        }
        stream.pointee.flush = UInt16(last ? NO_FLUSH : SYNC_FLUSH)
        stream.pointee.end_of_stream = last ? 1 : 0
        stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: UInt8.self))
        stream.pointee.avail_in = UInt32(input.count)
        defer { stream.pointee.next_in = nil }
        // The input plus an eighth (9-bit literals, the worst a Huffman code does with incompressible bytes) and room
        // for block headers and the flush: room left over is simply unused, and less would grow the buffer.
        return try output.fill(reserving: reserveBound ? input.count + input.count / 8 + 1024 : 0) { room in
            stream.pointee.next_out = room.baseAddress!.assumingMemoryBound(to: UInt8.self)
            stream.pointee.avail_out = UInt32(room.count)
            let rc = isal_deflate(stream)
            guard rc == COMP_OK else { throw FerryError(.io, "igzip deflate failed (\(rc))", path: path) }
            // Done when every input byte is in the output and igzip is between blocks (the flush's stored block, or
            // the final block, written): room left over proves it had nothing more to write.
            let state = stream.pointee.internal_state.state
            let finished =
                stream.pointee.avail_in == 0 && stream.pointee.avail_out > 0
                && (last ? state == ZSTATE_END : state == ZSTATE_NEW_HDR)
            return (room.count - Int(stream.pointee.avail_out), finished)
        }
    }

    /// ISA-L's gzip CRC-32 (the reflected IEEE polynomial, zlib's `crc32`), carry-less-multiply accelerated.
    func crc32(_ input: UnsafeRawBufferPointer) -> UInt32 {
        input.isEmpty
            ? 0 : crc32_gzip_refl(0, input.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(input.count))
    }
}
