import CZlib
import FerryCore
import Foundation

extension Gzip {
    /// The uncompressed bytes each thread of ``compressAndHashParallel(from:to:encoding:threads:chunkSize:)`` deflates
    /// at a time.
    public static let parallelChunkSize = 1 << 20

    /// Compresses `source` into `destination` (fsynced) as ONE gzip member whose deflate data several threads
    /// produce, pigz-style, and hashes `source` with SHA-256 in the same read.
    ///
    /// The calling thread reads the file in chunks of `chunkSize`, hashes each and hands it to one of `threads`
    /// deflating threads. Each chunk becomes raw deflate data (`encoding`: zlib's by default; the publisher uses
    /// ISA-L's igzip) primed with the previous chunk's last 32 KiB as its dictionary and ended by a sync flush (the
    /// last by a finish), so the pieces concatenate into one deflate stream; the calling thread writes them in order
    /// behind one gzip header and ends the member with the CRC-32 of the whole input (the chunks' CRCs combined) and
    /// its size mod 2^32. The result is an ordinary single-member gzip file that any inflater (zlib, `gzip`,
    /// browsers, nginx) reads. At most `2 × threads + 2` chunks are in flight, so memory stays flat whatever the file
    /// size.
    ///
    /// ```swift
    /// let compressed = try Gzip.compressAndHashParallel(from: sqliteURL, to: gzURL, encoding: .zlib(level: 1))
    /// print(compressed.sha256, compressed.size, compressed.gzipSize)
    /// ```
    public static func compressAndHashParallel(
        from source: URL, to destination: URL, encoding: ChunkEncoding = .zlib(level: 6),
        threads: Int = max(2, ProcessInfo.processInfo.activeProcessorCount), chunkSize: Int = parallelChunkSize
    ) throws -> Compressed {
        precondition(threads >= 1 && chunkSize >= 1, "threads and chunkSize must be positive")
        let (input, output) = try openFiles(from: source, to: destination)
        defer { try? input.close() }  // read-only: closing cannot lose data
        defer { try? output.close() }  // every byte was written and fsynced (or an error thrown) before this runs

        let pipeline = DeflatePipeline()
        let workers = (0..<threads).map { i in
            ThreadJob(name: "ferry.gzip.\(i)") {
                try ChunkDeflater.run(pipeline, encoding: encoding, path: destination.path)
            }
        }
        do {
            let compressed = try writeMember(
                from: input, source: source, to: output, destination: destination, extraFlags: encoding.extraFlags,
                pipeline: pipeline,
                capacity: 2 * threads + 2, chunkSize: chunkSize)
            pipeline.close()
            for worker in workers { try worker.join() }
            return compressed
        } catch {
            // Wake and stop the deflating threads; the first error (the caller's, or a thread's) is reported.
            pipeline.fail(error)
            for worker in workers { _ = try? worker.join() }  // their errors are this one or its consequence
            throw error
        }
    }

    /// ``compressAndHashParallel(from:to:encoding:threads:chunkSize:)`` with zlib's deflate at `level` (1 … 9).
    public static func compressAndHashParallel(
        from source: URL, to destination: URL, level: Int32,
        threads: Int = max(2, ProcessInfo.processInfo.activeProcessorCount),
        chunkSize: Int = parallelChunkSize
    ) throws -> Compressed {
        try compressAndHashParallel(
            from: source, to: destination, encoding: .zlib(level: level), threads: threads, chunkSize: chunkSize)
    }

    /// How ``compressAndHashParallel(from:to:encoding:threads:chunkSize:)`` deflates its chunks: one
    /// ``GzipChunkEncoder`` per deflating thread, and the header's XFL byte.
    public struct ChunkEncoding: Sendable {
        /// RFC 1952's XFL: 2 for the slowest, smallest level, 4 for the fastest, 0 otherwise.
        public var extraFlags: UInt8
        /// Makes one deflating thread's encoder (called on that thread).
        public var makeEncoder: @Sendable () throws -> any GzipChunkEncoder

        public init(extraFlags: UInt8, makeEncoder: @escaping @Sendable () throws -> any GzipChunkEncoder) {
            self.extraFlags = extraFlags
            self.makeEncoder = makeEncoder
        }

        /// zlib's deflate at `level` (1 fastest … 9 smallest), as zlib's own gzip wrapper marks it.
        public static func zlib(level: Int32) -> ChunkEncoding {
            ChunkEncoding(extraFlags: level == 9 ? 2 : (level == 1 ? 4 : 0)) { try ZlibChunkEncoder(level: level) }
        }
    }

    /// The calling thread's part: read, hash, hand out, and write the deflated chunks in order.
    private static func writeMember(
        from input: FileHandle, source: URL, to output: FileHandle, destination: URL, extraFlags: UInt8,
        pipeline: DeflatePipeline,
        capacity: Int, chunkSize: Int
    ) throws -> Compressed {
        func read() throws -> Data {
            do { return try input.read(upToCount: chunkSize) ?? Data() } catch {
                throw FerryError(.io, "cannot read file: \(error.localizedDescription)", path: source.path)
            }
        }
        func write(_ data: Data) throws {
            do { try output.write(contentsOf: data) } catch {
                throw FerryError(.io, "cannot write gzip file: \(error.localizedDescription)", path: destination.path)
            }
        }
        // RFC 1952 header: deflate, no flags, no mtime, the encoding's XFL, OS 3 (Unix), as zlib's own gzip wrapper
        // writes it.
        try write(Data([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, extraFlags, 3]))
        var gzipSize: Int64 = 10
        var size: Int64 = 0
        var crc: uLong = 0
        var hasher = StreamingSHA256()
        var submitted = 0
        var written = 0
        func writeNext() throws {
            let piece = try pipeline.result(written)
            crc = crc32_combine(crc, piece.crc, off_t(piece.length))
            try write(piece.deflated)
            gzipSize += Int64(piece.deflated.count)
            written += 1
        }

        var current = try read()
        var dictionary = Data()
        while true {
            // Read one chunk ahead: the chunk before an empty read is the last (an empty file is one empty chunk).
            let following = current.isEmpty ? Data() : try read()
            current.withUnsafeBytes { hasher.update($0) }
            size += Int64(current.count)
            while submitted - written >= capacity { try writeNext() }
            pipeline.submit(
                DeflatePipeline.Job(index: submitted, input: current, dictionary: dictionary, last: following.isEmpty))
            submitted += 1
            while pipeline.isReady(written) { try writeNext() }
            if following.isEmpty { break }
            dictionary = current.suffix(32 << 10)
            current = following
        }
        while written < submitted { try writeNext() }

        // RFC 1952 trailer: CRC-32 and ISIZE (the input size mod 2^32), little-endian.
        var trailer = Data()
        for value in [UInt32(truncatingIfNeeded: crc), UInt32(truncatingIfNeeded: size)] {
            withUnsafeBytes(of: value.littleEndian) { trailer.append(contentsOf: $0) }
        }
        try write(trailer)
        gzipSize += 8
        do { try output.synchronize() } catch {
            throw FerryError(.io, "cannot fsync gzip file: \(error.localizedDescription)", path: destination.path)
        }
        return Compressed(sha256: hasher.finalizeHex(), size: size, gzipSize: gzipSize)
    }
}

/// Chunks passed from the reading thread to the deflating threads and back, under one lock. The reader bounds how
/// many are in flight; results are taken by index, so they are written in input order whatever thread finished first.
/// Unchecked Sendable: every field is read and written under `condition`.
private final class DeflatePipeline: @unchecked Sendable {
    struct Job: Sendable {
        var index: Int
        var input: Data
        /// The previous chunk's last 32 KiB (empty for the first chunk).
        var dictionary: Data
        var last: Bool
    }

    struct Piece: Sendable {
        var deflated: Data
        /// CRC-32 and length of the chunk's uncompressed bytes.
        var crc: uLong
        var length: Int
    }

    private let condition = NSCondition()
    private var jobs: [Job] = []
    private var pieces: [Int: Piece] = [:]
    private var closed = false
    private var failure: (any Error)?

    /// Queues a chunk for the next free deflating thread.
    func submit(_ job: Job) {
        condition.lock()
        defer { condition.unlock() }
        jobs.append(job)
        condition.broadcast()
    }

    /// A deflating thread's next chunk; nil once the reader closed the queue and it is empty, or after a failure.
    func take() -> Job? {
        condition.lock()
        defer { condition.unlock() }
        while jobs.isEmpty && !closed && failure == nil { condition.wait() }
        if failure != nil || jobs.isEmpty { return nil }
        return jobs.removeFirst()
    }

    /// Hands back chunk `index`, deflated.
    func complete(_ index: Int, _ piece: Piece) {
        condition.lock()
        defer { condition.unlock() }
        pieces[index] = piece
        condition.broadcast()
    }

    /// Whether chunk `index` is deflated already (a failure counts: ``result(_:)`` then throws it).
    func isReady(_ index: Int) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        return pieces[index] != nil || failure != nil
    }

    /// Waits for chunk `index` and takes it, or throws the first failure.
    func result(_ index: Int) throws -> Piece {
        condition.lock()
        defer { condition.unlock() }
        while pieces[index] == nil && failure == nil { condition.wait() }
        if let failure { throw failure }
        return pieces.removeValue(forKey: index)!
    }

    /// No more chunks: the deflating threads return once the queue is empty.
    func close() {
        condition.lock()
        defer { condition.unlock() }
        closed = true
        condition.broadcast()
    }

    /// Stops everything; the first error is the one ``result(_:)`` throws.
    func fail(_ error: any Error) {
        condition.lock()
        defer { condition.unlock() }
        if failure == nil { failure = error }
        condition.broadcast()
    }
}

/// One deflating thread of ``Gzip/compressAndHashParallel(from:to:encoding:threads:chunkSize:)``.
private enum ChunkDeflater {
    static func run(_ pipeline: DeflatePipeline, encoding: Gzip.ChunkEncoding, path: String) throws {
        do {
            let encoder = try encoding.makeEncoder()
            while let job = pipeline.take() {
                let piece = try job.input.withUnsafeBytes { input in
                    try job.dictionary.withUnsafeBytes { dictionary in
                        let deflated = try encoder.encode(input, dictionary: dictionary, last: job.last, path: path)
                        return DeflatePipeline.Piece(
                            deflated: deflated, crc: uLong(encoder.crc32(input)), length: input.count)
                    }
                }
                pipeline.complete(job.index, piece)
            }
        } catch {
            pipeline.fail(error)
            throw error
        }
    }
}

/// One deflating thread's encoder for ``Gzip/compressAndHashParallel(from:to:encoding:threads:chunkSize:)``: turns
/// one chunk into raw deflate data (no zlib or gzip wrapper) primed with `dictionary` (the previous chunk's last
/// 32 KiB; empty for the first chunk) and ended by a sync flush, an empty stored block that leaves the next piece on
/// a byte boundary, or, for the `last` chunk, by the stream's final block. Used by one thread at a time.
public protocol GzipChunkEncoder: AnyObject {
    /// The chunk's deflate data; errors name `path` (the gzip file being written).
    func encode(_ input: UnsafeRawBufferPointer, dictionary: UnsafeRawBufferPointer, last: Bool, path: String) throws
        -> Data
    /// The gzip CRC-32 of `input` (zlib's `crc32` unless the encoder has a faster one).
    func crc32(_ input: UnsafeRawBufferPointer) -> UInt32
}

extension GzipChunkEncoder {
    public func crc32(_ input: UnsafeRawBufferPointer) -> UInt32 {
        input.isEmpty
            ? 0 : UInt32(CZlib.crc32(0, input.baseAddress!.assumingMemoryBound(to: Bytef.self), uInt(input.count)))
    }
}

/// The output of a ``GzipChunkEncoder``, kept between chunks: reserved up front to a bound on the chunk's deflate
/// data, and grown by half whenever the deflate library fills it, so a chunk is usually one call into the library.
public struct GzipChunkOutput {
    private var buffer = [UInt8]()

    public init() {}

    /// Calls `step` with the room left until it reports the chunk finished; `step` deflates into the room and
    /// returns the bytes it wrote. Returns everything written.
    public mutating func fill(
        reserving bound: Int, _ step: (_ room: UnsafeMutableRawBufferPointer) throws -> (written: Int, finished: Bool)
    ) rethrows -> Data {
        if buffer.count < bound { buffer = [UInt8](repeating: 0, count: bound) }
        var produced = 0
        while true {
            if produced == buffer.count { buffer.append(contentsOf: repeatElement(0, count: buffer.count / 2 + 1024)) }
            let (written, finished) = try buffer.withUnsafeMutableBytes {
                try step(UnsafeMutableRawBufferPointer(rebasing: $0[produced...]))
            }
            produced += written
            if finished { break }
        }
        return Data(buffer[0..<produced])
    }
}

/// zlib's deflate, one stream reset per chunk.
final class ZlibChunkEncoder: GzipChunkEncoder {
    /// zlib checks that a stream is used at the address it was initialised at, so it lives outside Swift's storage.
    private let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
    private var output = GzipChunkOutput()

    init(level: Int32) throws {
        stream.initialize(to: z_stream())
        // windowBits -15: raw deflate, the pieces of one gzip member.
        // A throw here still runs deinit (every property is set): deflateEnd refuses the zeroed stream, then it is
        // freed.
        guard
            deflateInit2_(
                stream, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
                == Z_OK
        else {
            throw FerryError(.io, "zlib deflateInit failed (level \(level))")
        }
    }

    deinit {
        deflateEnd(stream)
        stream.deallocate()
    }

    func encode(_ input: UnsafeRawBufferPointer, dictionary: UnsafeRawBufferPointer, last: Bool, path: String) throws
        -> Data
    {
        guard deflateReset(stream) == Z_OK else { throw FerryError(.io, "zlib deflateReset failed", path: path) }
        if !dictionary.isEmpty {
            let rc = deflateSetDictionary(
                stream, dictionary.baseAddress!.assumingMemoryBound(to: Bytef.self), uInt(dictionary.count))
            guard rc == Z_OK else { throw FerryError(.io, "zlib deflateSetDictionary failed", path: path) }
        }
        // A sync flush ends the chunk on a byte boundary (an empty stored block) without ending the stream; the
        // last chunk finishes it. deflateBound plus a margin for the flush's block usually fits in one call.
        let flush = last ? Z_FINISH : Z_SYNC_FLUSH
        stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: Bytef.self))
        stream.pointee.avail_in = uInt(input.count)
        defer { stream.pointee.next_in = nil }
        return try output.fill(reserving: Int(deflateBound(stream, uLong(input.count))) + 64) { room in
            stream.pointee.next_out = room.baseAddress!.assumingMemoryBound(to: Bytef.self)
            stream.pointee.avail_out = uInt(room.count)
            let rc = CZlib.deflate(stream, flush)
            guard rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR else {
                throw FerryError(.io, "zlib deflate failed (\(rc))", path: path)
            }
            let written = room.count - Int(stream.pointee.avail_out)
            return (written, last ? rc == Z_STREAM_END : (stream.pointee.avail_in == 0 && stream.pointee.avail_out > 0))
        }
    }
}
