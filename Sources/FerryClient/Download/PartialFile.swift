import FerryCore
import Foundation

/// `DIR/.ferry/partial.json`: the dataset, the snapshot a partial download was promised to become, and where its
/// bytes come from (the version URL and the representation: the SQLite file or its gzip copy, with its ETag).
///
/// ```json
/// {"dataset":"trips","expected":{"sha256":"…","size":49152,"version":3},
///  "source":{"url":"http://…/v1/datasets/trips/versions/3","encoding":"gzip","size":8120,"etag":"\"…-gzip\""}}
/// ```
struct PartialRecord: Codable, Equatable, Sendable {
    var dataset: String
    var expected: ExpectedSnapshot
    /// Nil in a record written by a client before version URLs: then the bytes are the SQLite file's own (identity)
    /// and resume from the version URL of `expected.version`.
    var source: TransferSource? = nil
}

/// Appends to a partial download file (`.ferry/partial.sqlite`, `.ferry/partial.gz`) through a write buffer (bounded
/// memory), mapping errno to typed errors.
/// Its blocking calls (init, ``flush()``, ``finish()``) run on the thread pool; `@unchecked Sendable` because one
/// download uses it, one awaited call after another, never two at once.
final class PartialFileWriter: @unchecked Sendable {
    private let handle: FileHandle
    private let url: URL
    private var buffer = Data()
    private let bufferSize: Int

    /// Opens `url` for writing at byte `offset`, truncating anything after it (a fresh download passes 0).
    init(url: URL, offset: Int64, bufferSize: Int) throws {
        self.url = url
        self.bufferSize = max(bufferSize, 4096)
        if !FileManager.default.fileExists(atPath: url.path) {
            guard FileManager.default.createFile(atPath: url.path, contents: nil) else {
                throw DurableFile.posixError("cannot create the partial download", url.path)
            }
        }
        do {
            handle = try FileHandle(forWritingTo: url)
            // Truncated only when it holds other bytes than the kept prefix: on ext4 a truncate, even of an empty
            // file to 0, marks it for a flush of all its pages at the next close of any descriptor of it (the
            // verification's read of the header), which then waited for the download's fsync (0.27 s on 660 MB).
            if try handle.seekToEnd() != UInt64(offset) {
                try handle.truncate(atOffset: UInt64(offset))
            }
            try handle.seek(toOffset: UInt64(offset))
        } catch {
            throw Self.mapped(error, "cannot open the partial download", url)
        }
        buffer.reserveCapacity(self.bufferSize)
    }

    // After finish() the handle is closed already; after an error, the bytes that matter were flushed (or reported).
    deinit { try? handle.close() }

    /// Buffers `chunk` in memory; true when the buffer is full and ``flush()`` is due.
    func buffer(_ chunk: Data) -> Bool {
        buffer.append(chunk)
        return buffer.count >= bufferSize
    }

    /// ``buffer(_:)-(Data)`` for bytes the caller owns only during the call (the inflater's output).
    func buffer(bytes: UnsafeRawBufferPointer) -> Bool {
        buffer.append(bytes.assumingMemoryBound(to: UInt8.self))
        return buffer.count >= bufferSize
    }

    /// Writes `bytes` after what is buffered: a big block goes straight to the file, a small one into the buffer.
    func write(_ bytes: UnsafeRawBufferPointer) throws {
        if bytes.count < bufferSize / 2 {
            if buffer(bytes: bytes) { try flush() }
            return
        }
        try flush()
        do {
            try handle.write(contentsOf: bytes)
        } catch {
            throw Self.mapped(error, "cannot write the download", url)
        }
    }

    func flush() throws {
        guard !buffer.isEmpty else { return }
        do {
            try handle.write(contentsOf: buffer)
        } catch {
            throw Self.mapped(error, "cannot write the download", url)
        }
        buffer.removeAll(keepingCapacity: true)
    }

    /// Flushes, fsyncs and closes: after this the bytes survive a power cut.
    func finish() throws {
        try flush()
        do {
            try handle.synchronize()
            try handle.close()
        } catch {
            throw Self.mapped(error, "cannot fsync the download", url)
        }
    }

    /// `ENOSPC` becomes `FerryError.Code.diskFull`; anything else an I/O error naming the file.
    static func mapped(_ error: any Error, _ what: String, _ url: URL) -> FerryError {
        FerryError.writing(
            error, what, url, fix: "free space and fetch again (the download resumes, database.db is unchanged)")
    }
}
