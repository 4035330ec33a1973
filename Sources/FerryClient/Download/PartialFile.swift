import FerryCore
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// `DIR/.ferry/partial.json`: the dataset and the snapshot a partial download was promised to become.
struct PartialRecord: Codable, Equatable, Sendable {
    var dataset: String
    var expected: ExpectedSnapshot
}

/// Appends to `.ferry/partial.sqlite` through a write buffer (bounded memory), mapping errno to typed errors.
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
            try handle.truncate(atOffset: UInt64(offset))
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

    /// `ENOSPC` becomes ``FerryError/Code/diskFull``; anything else an I/O error naming the file.
    static func mapped(_ error: any Error, _ what: String, _ url: URL) -> FerryError {
        let ns = error as NSError
        let outOfSpace =
            (ns.domain == NSCocoaErrorDomain && ns.code == CocoaError.fileWriteOutOfSpace.rawValue)
            || (ns.domain == NSPOSIXErrorDomain && ns.code == Int(ENOSPC))
        if outOfSpace {
            return FerryError(
                .diskFull, "\(what): the disk is full; free space and fetch again (the download resumes, database.db is unchanged)",
                path: url.path)
        }
        return FerryError(.io, "\(what): \(ns.localizedDescription)", path: url.path)
    }
}
