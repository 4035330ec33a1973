import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A lane for blocking work: runs `work` off Swift's cooperative threads and returns when it did (the client's
/// Dispatch queue, the server's `NIOThreadPool`; docs/ARCHITECTURE.md, "Concurrency").
///
/// ```swift
/// let lane: BlockingLane = { work in try await NIOThreadPool.singleton.runIfActive(work) }
/// ```
public typealias BlockingLane = @Sendable (_ work: @escaping @Sendable () throws -> Void) async throws -> Void

/// The one way a byte stream becomes a file whose SHA-256 and size are known: every write, hash and fsync runs on a
/// ``BlockingLane`` in hops of up to ``hopSize`` bytes (memory stays bounded, one hop per MiB, not per network chunk),
/// and the file is renamed into place only once ``finish(expecting:)`` found the bytes it was promised. Used by S3
/// downloads, attachment downloads and stores on the device, and the server's attachment uploads (PUT and tus).
///
/// A fresh file is hashed as it is written. One opened on a kept prefix (``Start/keptPrefix``: a resumed upload)
/// appends after it; ``finish(expecting:)`` then hashes the whole file once, from disk.
///
/// `@unchecked Sendable`: one transfer uses a writer, one awaited call after another, never two at once; its state is
/// touched only by the hop in flight.
///
/// ```swift
/// let writer = try await VerifiedFileWriter.open(temp, .new, lane: lane)
/// for try await chunk in body { try await writer.append(chunk) }
/// try await writer.finish(expecting: .init(sha256: sha256))
/// try await writer.commit(to: target)
/// ```
public final class VerifiedFileWriter: @unchecked Sendable {
    /// How the file is opened.
    public enum Start: Sendable {
        /// Created; it must not exist yet.
        case new
        /// Created, or emptied when it exists.
        case truncate
        /// Opened for appending after the bytes it holds, which count as written.
        case keptPrefix
    }

    /// What the bytes must be; a nil field is learned, not checked.
    public struct Expected: Sendable, Equatable {
        public var sha256: String?
        public var size: Int64?

        public init(sha256: String? = nil, size: Int64? = nil) {
            self.sha256 = sha256
            self.size = size
        }
    }

    /// What was written: final after ``finish(expecting:)``.
    public struct Written: Sendable, Equatable {
        /// The SHA-256 of the whole file, lowercase hex.
        public var sha256: String
        /// Its size in bytes.
        public var size: Int64
    }

    /// Bytes gathered before one hop to the lane.
    public static let hopSize = 1 << 20

    /// The file written.
    public let url: URL
    /// Its open descriptor (until ``finish(expecting:)`` or ``discard()``), for a caller's `flock`.
    package let descriptor: Int32
    private let lane: BlockingLane
    /// Nil when the file began with a kept prefix: it is hashed whole, from disk, at the end.
    private var hasher: StreamingSHA256?
    private var pending = Data()
    private var closed = false
    /// Bytes in the file and in `pending`.
    public private(set) var size: Int64

    private init(url: URL, descriptor: Int32, size: Int64, lane: @escaping BlockingLane) {
        self.url = url
        self.descriptor = descriptor
        self.size = size
        self.lane = lane
        hasher = size == 0 ? StreamingSHA256() : nil
    }

    deinit { if !closed { close(descriptor) } }

    /// Opens `url` on `lane` as `start` says.
    public static func open(_ url: URL, _ start: Start, lane: @escaping BlockingLane) async throws
        -> VerifiedFileWriter
    {
        let opened = Locked<(Int32, Int64)>((-1, 0))
        try await lane {
            let flags: Int32
            switch start {
            case .new: flags = O_WRONLY | O_CREAT | O_EXCL
            case .truncate: flags = O_WRONLY | O_CREAT | O_TRUNC
            case .keptPrefix: flags = O_WRONLY | O_APPEND
            }
            let fd = systemOpen(url.path, flags | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw DurableFile.posixError("cannot create", url.path) }
            let end = lseek(fd, 0, SEEK_END)
            guard end >= 0 else {
                close(fd)
                throw DurableFile.posixError("cannot open", url.path)
            }
            opened.withLock { $0 = (fd, Int64(end)) }
        }
        let (fd, size) = opened.current
        return VerifiedFileWriter(url: url, descriptor: fd, size: size, lane: lane)
    }

    /// Gathers `bytes` for the next hop; true when a hop is due (``flush()``). For bytes the caller owns only during
    /// the call (a `ByteBuffer`'s).
    public func buffer(_ bytes: UnsafeRawBufferPointer) -> Bool {
        pending.append(bytes.assumingMemoryBound(to: UInt8.self))
        size += Int64(bytes.count)
        return pending.count >= Self.hopSize
    }

    /// Gathers `data`, writing a hop when ``hopSize`` bytes are waiting.
    public func append(_ data: Data) async throws {
        pending.append(data)
        size += Int64(data.count)
        if pending.count >= Self.hopSize { try await flush() }
    }

    /// Hashes and writes the gathered bytes on the lane.
    public func flush() async throws {
        guard !pending.isEmpty else { return }
        let chunk = pending
        pending = Data()
        let (fd, path, hasher) = (descriptor, url.path, Locked(self.hasher))
        try await lane {
            try chunk.withUnsafeBytes { bytes in
                hasher.withLock { $0?.update(bytes) }
                try DurableFile.writeAll(bytes, to: fd, path: path)
            }
        }
        self.hasher = hasher.current
    }

    /// Writes what is gathered and fsyncs: what arrived survives a crash (a broken upload kept for its resume).
    public func sync() async throws {
        try await flush()
        let (fd, path) = (descriptor, url.path)
        try await lane { guard fsync(fd) == 0 else { throw DurableFile.posixError("cannot fsync", path) } }
    }

    /// Cuts the file back to `size` bytes, dropping what is gathered, and fsyncs it.
    public func truncate(to size: Int64) async throws {
        pending = Data()
        hasher = nil
        self.size = size
        let (fd, path) = (descriptor, url.path)
        try await lane {
            guard ftruncate(fd, off_t(size)) == 0 else { throw DurableFile.posixError("cannot truncate", path) }
            guard fsync(fd) == 0 else { throw DurableFile.posixError("cannot fsync", path) }
        }
    }

    /// Writes what is gathered, fsyncs and closes the file, and checks it against `expected`: a mismatch throws
    /// `FerryError.Code.verification` naming the file (the caller deletes or keeps it).
    @discardableResult
    public func finish(expecting expected: Expected = Expected()) async throws -> Written {
        try await sync()
        closed = true
        let (fd, url, hasher) = (descriptor, url, self.hasher)
        let digest = Locked("")
        try await lane {
            close(fd)
            let hex = try hasher?.finalizeHex() ?? FileDigest.sha256Hex(of: url)
            digest.withLock { $0 = hex }
        }
        let written = Written(sha256: digest.current, size: size)
        if let want = expected.size, want != written.size {
            throw FerryError(
                .verification, "the file has \(written.size) bytes, not the \(want) promised; it is not kept",
                path: url.path)
        }
        if let want = expected.sha256, want != written.sha256 {
            throw FerryError(
                .verification, "the file's SHA-256 is \(written.sha256), not the \(want) promised; it is not kept",
                path: url.path)
        }
        return written
    }

    /// Renames the finished file over `target` and fsyncs the directory, on the lane.
    public func commit(to target: URL) async throws {
        let url = url
        try await lane { try DurableFile.rename(url, to: target) }
    }

    /// Closes and deletes the file (an abandoned or refused transfer), on the lane; errors are ignored: a leftover
    /// temp file is swept later.
    public func discard() async {
        let (fd, url, open) = (descriptor, url, !closed)
        closed = true
        // Removing scratch after a failure: the original error is the one reported.
        try? await lane {
            if open { close(fd) }
            unlink(url.path)
        }
    }
}

@inline(__always)
private func systemOpen(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 {
    open(path, flags, mode)
}
