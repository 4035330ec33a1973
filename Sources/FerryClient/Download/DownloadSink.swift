import Crypto
import FerryCore
import Foundation

/// Where one download's body goes, with SHA-256 over the SQLite file's bytes on the way (the checksum that identifies
/// and verifies a snapshot, whatever the encoding on the wire).
///
/// - identity: the body is the SQLite file; it is appended to `.ferry/partial.sqlite` and hashed.
/// - gzip: the body is the server's gzip copy. Its bytes are appended to `.ferry/partial.gz` (the prefix a resume
///   continues with `Range`), and inflated as they arrive into `.ferry/partial.sqlite`; the inflated bytes are hashed.
///   The inflater's state is never saved: a resume re-inflates the kept compressed prefix from disk, rewriting
///   `partial.sqlite` from byte 0 and hashing it, then goes on with the new bytes. That costs one local pass over the
///   prefix, and keeps `partial.sqlite` exactly the inflation of `partial.gz`, whatever a crash left behind.
///
/// The identity path's ``take(_:)`` only buffers and hashes (the caller flushes on the thread pool); the gzip path's
/// ``takeCompressed(_:)`` inflates and writes, so it runs on the thread pool itself, which also keeps memory bounded
/// however much a chunk inflates to. `@unchecked Sendable` as ``PartialFileWriter``: one download uses it, one awaited
/// call after another.
final class DownloadSink: @unchecked Sendable {
    /// A kept prefix that cannot be continued (a corrupt or unreadable compressed prefix): start again from byte 0.
    struct UnusablePrefix: Error {
        var reason: String
    }

    let encoding: TransferEncoding
    /// The byte of the representation this transfer started at (0, or the kept prefix).
    let resumedFrom: Int64
    /// Bytes of the representation so far, the kept prefix included.
    private(set) var wireBytes: Int64
    /// Bytes of the SQLite file so far.
    private(set) var fileBytes: Int64
    private let file: PartialFileWriter
    private let compressed: PartialFileWriter?
    private let inflater: GzipInflater?
    private var hasher = SHA256()
    /// The SQLite file's promised size: inflating to more is an error (and stops a gzip bomb early).
    private let fileLimit: Int64?

    /// Opens the partial files to continue at byte `from` of the representation (0 for a fresh download), rehashing
    /// (identity) or re-inflating (gzip) the kept prefix. Blocking: call it on the thread pool.
    init(directory: ClientDirectory, encoding: TransferEncoding, from: Int64, fileLimit: Int64?, bufferSize: Int) throws
    {
        self.encoding = encoding
        self.resumedFrom = from
        self.fileLimit = fileLimit
        wireBytes = from
        switch encoding {
        case .identity:
            file = try PartialFileWriter(url: directory.partial, offset: from, bufferSize: bufferSize)
            compressed = nil
            inflater = nil
            fileBytes = from
            try hashPrefix(of: directory.partial, count: from)
        case .gzip:
            compressed = try PartialFileWriter(url: directory.partialGzip, offset: from, bufferSize: bufferSize)
            file = try PartialFileWriter(url: directory.partial, offset: 0, bufferSize: bufferSize)
            let inflater = try GzipInflater()
            self.inflater = inflater
            fileBytes = 0
            try reinflatePrefix(of: directory.partialGzip, count: from, with: inflater)
        }
    }

    /// Identity: hashes and buffers a chunk of the SQLite file; true when the buffer is full and ``flush()`` is due.
    /// No I/O.
    func take(_ chunk: Data) -> Bool {
        precondition(encoding == .identity)
        hasher.update(data: chunk)
        wireBytes += Int64(chunk.count)
        fileBytes += Int64(chunk.count)
        return file.buffer(chunk)
    }

    /// Gzip: keeps a chunk of the compressed stream, inflates it, hashes and writes the inflated bytes. Blocking: call
    /// it on the thread pool. A corrupt stream or one inflating past the promised size throws
    /// `FerryError.Code.corruptTransfer`.
    func takeCompressed(_ chunk: Data) throws {
        guard let compressed, let inflater else { preconditionFailure("takeCompressed on an identity download") }
        if compressed.buffer(chunk) { try compressed.flush() }
        wireBytes += Int64(chunk.count)
        try inflate(chunk, with: inflater)
    }

    /// Writes out what is buffered (both files).
    func flush() throws {
        try compressed?.flush()
        try file.flush()
    }

    /// The body has ended: checks that the gzip stream ended with its trailer, fsyncs the SQLite file and returns
    /// its SHA-256. Blocking: call it on the thread pool.
    func finish() throws -> String {
        if let inflater {
            do {
                try inflater.finish()
            } catch let error as FerryError {
                throw FerryError(
                    .corruptTransfer,
                    "the gzip stream is incomplete: \(error.message); the download was discarded, fetch again")
            }
        }
        try file.finish()
        return hasher.finalize().hex
    }

    // MARK: Private

    private func inflate(_ chunk: Data, with inflater: GzipInflater) throws {
        do {
            try inflater.inflate(chunk) { piece in
                if let fileLimit, fileBytes + Int64(piece.count) > fileLimit {
                    throw FerryError(
                        .corruptTransfer,
                        "the gzip stream inflates to more than the \(fileLimit) bytes the manifest announced; the download was discarded, fetch again"
                    )
                }
                hasher.update(bufferPointer: piece)
                if file.buffer(bytes: piece) { try file.flush() }
                fileBytes += Int64(piece.count)
            }
        } catch let error as FerryError where error.code == .verification {
            throw FerryError(
                .corruptTransfer,
                "the server's gzip stream is corrupt (\(error.message)); the download was discarded, fetch again (an HTTP client or proxy that inflates gzip itself also causes this)"
            )
        }
    }

    /// Hashes the first `count` bytes already on disk, so a resumed download is verified end to end.
    private func hashPrefix(of url: URL, count: Int64) throws {
        try readPrefix(of: url, count: count) { hasher.update(data: $0) }
    }

    /// Inflates the kept compressed prefix into `partial.sqlite` (from byte 0), hashing it, so the inflater stands
    /// exactly where the kept bytes end.
    private func reinflatePrefix(of url: URL, count: Int64, with inflater: GzipInflater) throws {
        do {
            try readPrefix(of: url, count: count) { try inflate($0, with: inflater) }
        } catch let error as FerryError where error.code == .corruptTransfer {
            throw UnusablePrefix(reason: "the kept compressed prefix cannot be inflated: \(error.message)")
        }
        if inflater.isFinished {
            throw UnusablePrefix(reason: "the kept compressed prefix already holds the whole gzip stream")
        }
    }

    private func readPrefix(of url: URL, count: Int64, _ body: (Data) throws -> Void) throws {
        guard count > 0 else { return }
        guard let handle = FileHandle(forReadingAtPath: url.path) else {
            throw FerryError(.io, "cannot open the partial download to resume it", path: url.path)
        }
        // A read-only handle: closing it cannot lose data.
        defer { try? handle.close() }
        var remaining = count
        while remaining > 0 {
            let chunk: Data
            do {
                chunk = try handle.read(upToCount: Int(min(remaining, 1 << 20))) ?? Data()
            } catch {
                throw FerryError(
                    .io, "cannot read the partial download to resume it: \(error.localizedDescription)", path: url.path)
            }
            guard !chunk.isEmpty else {
                throw FerryError(.io, "the partial download is shorter than expected; fetch again", path: url.path)
            }
            try body(chunk)
            remaining -= Int64(chunk.count)
        }
    }
}
