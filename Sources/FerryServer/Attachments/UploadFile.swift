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

/// Why an upload's body stopped before its end.
enum UploadStreamEnd: Error {
    /// More than the limit arrived; the bytes up to it were gathered.
    case overLimit
}

/// An upload's file: a whole upload's temp file (PUT) or a partial upload (tus PATCH), written by
/// ``VerifiedFileWriter`` on `NIOThreadPool.singleton` (docs/ARCHITECTURE.md, "Concurrency").
extension VerifiedFileWriter {
    /// The server's lane for short blocking file work.
    static let serverLane: BlockingLane = { work in try await NIOThreadPool.singleton.runIfActive(work) }

    /// Opens an upload's file on the server's lane.
    static func upload(_ url: URL, _ start: Start) async throws -> VerifiedFileWriter {
        try await open(url, start, lane: serverLane)
    }

    /// Takes this file's exclusive `flock` without waiting; false when another holder (a PATCH of the same upload on
    /// another server sharing the uploads directory) has it. Released when the file closes.
    func tryLock() -> Bool {
        flock(descriptor, LOCK_EX | LOCK_NB) == 0
    }

    /// Appends `body`, hopping to the lane at each MiB; returns the bytes it held. Throws
    /// ``UploadStreamEnd/overLimit`` when more than `limit` bytes arrive (the excess is not gathered), and the body's
    /// own error when the connection breaks: what arrived before is gathered, neither written nor synced (the caller
    /// decides: ``sync()`` or ``discard()``).
    func append(_ body: RequestBody, limit: Int64) async throws -> Int64 {
        let start = size
        for try await var piece in body {
            let room = limit - (size - start)
            if Int64(piece.readableBytes) > room {
                if room > 0, let slice = piece.readSlice(length: Int(room)) {
                    _ = slice.withUnsafeReadableBytes(buffer)
                }
                throw UploadStreamEnd.overLimit
            }
            if piece.withUnsafeReadableBytes(buffer) { try await flush() }
        }
        return size - start
    }
}
