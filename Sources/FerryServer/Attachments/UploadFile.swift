import FerryCore
import Foundation
import Hummingbird
import NIOCore
import NIOPosix

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A file an upload's body is appended to: a whole upload's temp file (PUT) or a partial upload (tus PATCH). Its
/// blocking calls run on `NIOThreadPool.singleton` (docs/ARCHITECTURE.md, "Concurrency"), one bounded chunk at a
/// time.
final class UploadFile: Sendable {
    let descriptor: Int32
    let url: URL

    /// Opens `url` for appending; `create`: it must not exist yet (a new upload).
    init(_ url: URL, create: Bool) throws {
        let flags = O_WRONLY | O_APPEND | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0)
        let fd = open(url.path, flags, 0o644)
        guard fd >= 0 else { throw DurableFile.posixError("cannot open the upload", url.path) }
        descriptor = fd
        self.url = url
    }

    deinit { close(descriptor) }

    /// Appends `buffer` (blocking).
    func append(_ buffer: ByteBuffer) throws {
        try buffer.withUnsafeReadableBytes { try DurableFile.writeAll($0, to: descriptor, path: url.path) }
    }

    /// Takes this file's exclusive `flock` without waiting; false when another holder (a PATCH of the same upload on
    /// another server sharing the uploads directory) has it. Released when the file closes.
    func tryLock() -> Bool {
        flock(descriptor, LOCK_EX | LOCK_NB) == 0
    }

    /// The file's size now (`fstat`).
    func size() throws -> Int64 {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw DurableFile.posixError("cannot stat the upload", url.path) }
        return Int64(info.st_size)
    }

    /// Fsyncs what was written (blocking).
    func sync() throws {
        guard fsync(descriptor) == 0 else { throw DurableFile.posixError("cannot fsync the upload", url.path) }
    }

    /// Cuts the file back to `size` bytes and fsyncs it (blocking).
    func truncate(to size: Int64) throws {
        guard ftruncate(descriptor, off_t(size)) == 0 else {
            throw DurableFile.posixError("cannot truncate the upload", url.path)
        }
        try sync()
    }

    /// Why a body stopped before its end.
    enum StreamEnd: Error {
        /// More than `limit` bytes arrived; those up to the limit were written.
        case overLimit
    }

    /// Appends `body` in chunks of up to 1 MiB, each written (and hashed into `hasher`, when given) on the thread
    /// pool; returns the bytes written. Throws ``StreamEnd/overLimit`` when more than `limit` bytes arrive (the
    /// excess is not written), and the body's own error when the connection breaks: what arrived before stays
    /// written, not synced (the caller decides).
    func append(
        _ body: RequestBody, limit: Int64, hasher: Locked<StreamingSHA256>? = nil,
        threadPool: NIOThreadPool = .singleton
    ) async throws -> Int64 {
        var written: Int64 = 0
        var pending = ByteBuffer()
        func flush() async throws {
            guard pending.readableBytes > 0 else { return }
            let chunk = pending
            pending = ByteBuffer()
            try await threadPool.runIfActive {
                if let hasher { chunk.withUnsafeReadableBytes { raw in hasher.withLock { $0.update(raw) } } }
                try self.append(chunk)
            }
        }
        do {
            for try await var piece in body {
                let room = limit - written
                if Int64(piece.readableBytes) > room {
                    if room > 0, let slice = piece.readSlice(length: Int(room)) { pending.writeImmutableBuffer(slice) }
                    written = limit
                    try await flush()
                    throw StreamEnd.overLimit
                }
                written += Int64(piece.readableBytes)
                pending.writeBuffer(&piece)
                if pending.readableBytes >= 1 << 20 { try await flush() }
            }
        } catch let error as StreamEnd {
            throw error
        } catch {
            // The connection broke: keep what arrived.
            try await flush()
            throw error
        }
        try await flush()
        return written
    }
}
