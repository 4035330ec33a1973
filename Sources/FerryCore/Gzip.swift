import CZlib
import Foundation

/// Streaming gzip (zlib, level 6 by default): memory stays flat whatever the file size.
///
/// ```swift
/// let size = try Gzip.compressFile(from: sqliteURL, to: gzURL)
/// ```
public enum Gzip {
    /// Compresses `source` into `destination` as a gzip stream and fsyncs it. Returns the compressed size.
    @discardableResult
    public static func compressFile(from source: URL, to destination: URL, level: Int32 = 6) throws -> Int64 {
        try compress(from: source, to: destination, level: level, hashing: false).gzipSize
    }

    /// What ``compressAndHash(from:to:level:)`` read and wrote.
    public struct Compressed: Sendable, Equatable {
        /// Lowercase hex SHA-256 of the source file.
        public var sha256: String
        /// Bytes read from the source.
        public var size: Int64
        /// Bytes of the gzip stream written.
        public var gzipSize: Int64

        package init(sha256: String, size: Int64, gzipSize: Int64) {
            self.sha256 = sha256
            self.size = size
            self.gzipSize = gzipSize
        }
    }

    /// Compresses `source` into `destination` (fsynced) and hashes `source` with SHA-256 in the same pass: each
    /// chunk is read once, hashed, then deflated, so the file is not read twice.
    ///
    /// ```swift
    /// let compressed = try Gzip.compressAndHash(from: sqliteURL, to: gzURL, level: 1)
    /// print(compressed.sha256, compressed.size, compressed.gzipSize)
    /// ```
    public static func compressAndHash(from source: URL, to destination: URL, level: Int32 = 6) throws -> Compressed {
        try compress(from: source, to: destination, level: level, hashing: true)
    }

    /// Opens `source` to read and creates (or truncates) `destination` to write; the caller closes both.
    package static func openFiles(from source: URL, to destination: URL) throws -> (
        input: FileHandle, output: FileHandle
    ) {
        guard let input = FileHandle(forReadingAtPath: source.path) else {
            throw FerryError(.io, "cannot open file to compress", path: source.path)
        }
        guard FileManager.default.createFile(atPath: destination.path, contents: nil),
            let output = FileHandle(forWritingAtPath: destination.path)
        else {
            try? input.close()  // read-only: closing cannot lose data
            throw FerryError(.io, "cannot create gzip file", path: destination.path)
        }
        return (input, output)
    }

    private static func compress(from source: URL, to destination: URL, level: Int32, hashing: Bool) throws
        -> Compressed
    {
        let (input, output) = try openFiles(from: source, to: destination)
        defer { try? input.close() }  // read-only: closing cannot lose data
        defer { try? output.close() }  // every byte was written and fsynced (or an error thrown) before this runs

        var stream = z_stream()
        // windowBits 15 + 16 selects the gzip wrapper.
        guard
            deflateInit2_(
                &stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION,
                Int32(MemoryLayout<z_stream>.size)) == Z_OK
        else {
            throw FerryError(.io, "zlib deflateInit failed", path: destination.path)
        }
        defer { deflateEnd(&stream) }

        let chunk = 1 << 20
        var outBuffer = [UInt8](repeating: 0, count: chunk)
        var total: Int64 = 0
        var size: Int64 = 0
        var hasher = StreamingSHA256()
        func drain(flush: Int32) throws {
            repeat {
                let produced: Int = try outBuffer.withUnsafeMutableBytes { out -> Int in
                    stream.next_out = out.baseAddress!.assumingMemoryBound(to: Bytef.self)
                    stream.avail_out = uInt(chunk)
                    let rc = deflate(&stream, flush)
                    guard rc != Z_STREAM_ERROR else {
                        throw FerryError(.io, "zlib deflate failed", path: destination.path)
                    }
                    return chunk - Int(stream.avail_out)
                }
                if produced > 0 {
                    do { try output.write(contentsOf: outBuffer[0..<produced]) } catch {
                        throw FerryError(
                            .io, "cannot write gzip file: \(error.localizedDescription)", path: destination.path)
                    }
                    total += Int64(produced)
                }
            } while stream.avail_out == 0
        }
        while true {
            let data: Data
            do { data = try input.read(upToCount: chunk) ?? Data() } catch {
                throw FerryError(.io, "cannot read file: \(error.localizedDescription)", path: source.path)
            }
            if data.isEmpty { break }
            size += Int64(data.count)
            try data.withUnsafeBytes { raw in
                if hashing { hasher.update(raw) }
                stream.next_in = UnsafeMutablePointer(mutating: raw.baseAddress!.assumingMemoryBound(to: Bytef.self))
                stream.avail_in = uInt(raw.count)
                try drain(flush: Z_NO_FLUSH)
            }
        }
        stream.next_in = nil
        stream.avail_in = 0
        try drain(flush: Z_FINISH)
        do { try output.synchronize() } catch {
            throw FerryError(.io, "cannot fsync gzip file: \(error.localizedDescription)", path: destination.path)
        }
        return Compressed(sha256: hashing ? hasher.finalizeHex() : "", size: size, gzipSize: total)
    }

    /// Decompresses a gzip file (used by tests and by clients that fetched the gzip encoding), streaming through a
    /// ``GzipInflater``. A corrupt or truncated stream, or bytes after its end, throw ``FerryError/Code/verification``.
    public static func decompressFile(from source: URL, to destination: URL) throws {
        guard let input = FileHandle(forReadingAtPath: source.path) else {
            throw FerryError(.io, "cannot open gzip file", path: source.path)
        }
        defer { try? input.close() }  // read-only: closing cannot lose data
        guard FileManager.default.createFile(atPath: destination.path, contents: nil),
            let output = FileHandle(forWritingAtPath: destination.path)
        else { throw FerryError(.io, "cannot create file", path: destination.path) }
        defer { try? output.close() }  // a failed write throws below; callers fsync the result before trusting it
        let inflater = try GzipInflater(outputChunkSize: 1 << 20)
        do {
            while true {
                let data: Data
                do { data = try input.read(upToCount: 1 << 20) ?? Data() } catch {
                    throw FerryError(.io, "cannot read gzip file: \(error.localizedDescription)", path: source.path)
                }
                if data.isEmpty { break }
                try inflater.inflate(data) { piece in
                    do { try output.write(contentsOf: Data(piece)) } catch {
                        throw FerryError(
                            .io, "cannot write file: \(error.localizedDescription)", path: destination.path)
                    }
                }
            }
            try inflater.finish()
        } catch var error as FerryError where error.code == .verification {
            error.path = source.path
            throw error
        }
    }
}
