import CZlib
import Foundation

extension Gzip {
    /// The uncompressed bytes each thread of ``compressAndHashParallel(from:to:level:threads:chunkSize:)`` deflates
    /// at a time.
    public static let parallelChunkSize = 1 << 20

    /// Compresses `source` into `destination` (fsynced) as ONE gzip member whose deflate data several threads
    /// produce, pigz-style, and hashes `source` with SHA-256 in the same read.
    ///
    /// The calling thread reads the file in chunks of `chunkSize`, hashes each and hands it to one of `threads`
    /// deflating threads. Each chunk becomes raw deflate data (level `level`) primed with the previous chunk's last
    /// 32 KiB as its dictionary and ended by a sync flush (the last by a finish), so the pieces concatenate into one
    /// deflate stream; the calling thread writes them in order behind one gzip header and ends the member with the
    /// CRC-32 of the whole input (the chunks' CRCs combined) and its size mod 2^32. The result is an ordinary
    /// single-member gzip file that any inflater (zlib, `gzip`, browsers, nginx) reads. At most `2 × threads + 2`
    /// chunks are in flight, so memory stays flat whatever the file size.
    ///
    /// ```swift
    /// let compressed = try Gzip.compressAndHashParallel(from: sqliteURL, to: gzURL, level: 1)
    /// print(compressed.sha256, compressed.size, compressed.gzipSize)
    /// ```
    public static func compressAndHashParallel(
        from source: URL, to destination: URL, level: Int32 = 6, threads: Int = max(2, ProcessInfo.processInfo.activeProcessorCount),
        chunkSize: Int = parallelChunkSize
    ) throws -> Compressed {
        precondition(threads >= 1 && chunkSize >= 1, "threads and chunkSize must be positive")
        let (input, output) = try openFiles(from: source, to: destination)
        defer { try? input.close() }  // read-only: closing cannot lose data
        defer { try? output.close() }  // every byte was written and fsynced (or an error thrown) before this runs

        let pipeline = DeflatePipeline()
        let workers = (0..<threads).map { i in
            ThreadJob(name: "ferry.gzip.\(i)") { try ChunkDeflater.run(pipeline, level: level, path: destination.path) }
        }
        do {
            let compressed = try writeMember(from: input, source: source, to: output, destination: destination, level: level, pipeline: pipeline, capacity: 2 * threads + 2, chunkSize: chunkSize)
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

    /// The calling thread's part: read, hash, hand out, and write the deflated chunks in order.
    private static func writeMember(
        from input: FileHandle, source: URL, to output: FileHandle, destination: URL, level: Int32, pipeline: DeflatePipeline, capacity: Int,
        chunkSize: Int
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
        // RFC 1952 header: deflate, no flags, no mtime, XFL 4 (fastest) for level 1 or 2 (best) for 9, OS 3 (Unix),
        // as zlib's own gzip wrapper writes it.
        let extraFlags: UInt8 = level == 9 ? 2 : (level == 1 ? 4 : 0)
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
            pipeline.submit(DeflatePipeline.Job(index: submitted, input: current, dictionary: dictionary, last: following.isEmpty))
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

/// One deflating thread: raw deflate (no zlib or gzip wrapper), one stream reset per chunk.
private enum ChunkDeflater {
    static func run(_ pipeline: DeflatePipeline, level: Int32, path: String) throws {
        do {
            var stream = z_stream()
            // windowBits -15: raw deflate, the pieces of one gzip member.
            guard deflateInit2_(&stream, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
                throw FerryError(.io, "zlib deflateInit failed", path: path)
            }
            defer { deflateEnd(&stream) }
            var buffer = [UInt8]()
            while let job = pipeline.take() {
                let piece = try deflate(job, stream: &stream, buffer: &buffer, path: path)
                pipeline.complete(job.index, piece)
            }
        } catch {
            pipeline.fail(error)
            throw error
        }
    }

    private static func deflate(_ job: DeflatePipeline.Job, stream: inout z_stream, buffer: inout [UInt8], path: String) throws -> DeflatePipeline.Piece {
        guard deflateReset(&stream) == Z_OK else { throw FerryError(.io, "zlib deflateReset failed", path: path) }
        if !job.dictionary.isEmpty {
            let rc = job.dictionary.withUnsafeBytes { raw in
                deflateSetDictionary(&stream, raw.baseAddress!.assumingMemoryBound(to: Bytef.self), uInt(raw.count))
            }
            guard rc == Z_OK else { throw FerryError(.io, "zlib deflateSetDictionary failed", path: path) }
        }
        // A sync flush ends the chunk on a byte boundary (an empty stored block) without ending the stream; the
        // last chunk finishes it. deflateBound plus a margin for the flush's block usually fits in one call.
        let flush = job.last ? Z_FINISH : Z_SYNC_FLUSH
        let bound = Int(deflateBound(&stream, uLong(job.input.count))) + 64
        if buffer.count < bound { buffer = [UInt8](repeating: 0, count: bound) }
        var produced = 0
        let crc: uLong = try job.input.withUnsafeBytes { raw in
            let base = raw.baseAddress?.assumingMemoryBound(to: Bytef.self)
            stream.next_in = UnsafeMutablePointer(mutating: base)
            stream.avail_in = uInt(raw.count)
            while true {
                if produced == buffer.count { buffer.append(contentsOf: repeatElement(0, count: buffer.count / 2 + 64)) }
                let rc = buffer.withUnsafeMutableBytes { out -> Int32 in
                    stream.next_out = out.baseAddress!.assumingMemoryBound(to: Bytef.self) + produced
                    stream.avail_out = uInt(out.count - produced)
                    let rc = CZlib.deflate(&stream, flush)
                    produced = out.count - Int(stream.avail_out)
                    return rc
                }
                guard rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR else { throw FerryError(.io, "zlib deflate failed (\(rc))", path: path) }
                if job.last ? rc == Z_STREAM_END : (stream.avail_in == 0 && produced < buffer.count) { break }
            }
            stream.next_in = nil
            return raw.isEmpty ? 0 : crc32(0, base, uInt(raw.count))
        }
        return DeflatePipeline.Piece(deflated: Data(buffer[0..<produced]), crc: crc, length: job.input.count)
    }
}
