import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The blocking core of ``VerifiedFileWriter``: one file opened for writing, hashed as it is written, fsynced, checked
/// against what it was promised and renamed into place. Every call blocks: make them off Swift's cooperative threads,
/// on a ``BlockingLane`` (``VerifiedFileWriter``) or on threads of one's own (the snapshot download's stages).
///
/// Hashing and writing may run on two threads at once, ``hash(_:)`` on one and ``write(_:)`` on the other, fed the
/// same bytes in the same order: each touches only its own state. Everything else is called by one thread after the
/// other has finished. `@unchecked Sendable` for that reason.
///
/// ```swift
/// let file = try VerifiedFile(temp, .new)
/// try file.append(bytes)
/// try file.finish(expecting: .init(sha256: sha256))
/// try file.commit(to: target)
/// ```
public final class VerifiedFile: @unchecked Sendable {
    /// How the file is opened.
    public enum Start: Sendable, Equatable {
        /// Created; it must not exist yet.
        case new
        /// Created, or emptied when it exists.
        case truncate
        /// Opened for appending after the bytes it holds, which count as written and are hashed from disk by
        /// ``finish(expecting:)`` (a resumed upload).
        case keptPrefix
        /// Created or opened after its first `count` bytes, which count as written; bytes after them are cut (a
        /// resumed download whose record vouches for `count`). Hashed from disk unless ``hashKept()`` read them.
        case keeping(Int64)
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

    /// The file written.
    public let url: URL
    /// Its open descriptor (until ``close()`` or ``discard()``), for a caller's `flock`.
    package let descriptor: Int32
    /// The bytes it held when opened that count as written.
    public let kept: Int64
    /// Bytes written, and gathered in the write buffer.
    public private(set) var size: Int64
    /// Nil while kept bytes are not hashed: the whole file is hashed from disk at the end.
    private var hasher: StreamingSHA256?
    private var buffer = Data()
    private let bufferSize: Int
    private var closed = false

    /// Opens `url` as `start` says. Writes smaller than half of `bufferSize` are gathered up to it first (0: every
    /// write goes straight to the file).
    public init(_ url: URL, _ start: Start, bufferSize: Int = 0) throws {
        let flags: Int32
        var keep: Int64? = nil
        switch start {
        case .new: flags = O_WRONLY | O_CREAT | O_EXCL
        case .truncate: (flags, keep) = (O_WRONLY | O_CREAT, 0)
        case .keptPrefix: flags = O_WRONLY | O_APPEND
        case .keeping(let count): (flags, keep) = (O_WRONLY | O_CREAT, count)
        }
        let fd = systemOpen(url.path, flags | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw DurableFile.posixError("cannot create", url.path) }
        do {
            kept = try Self.position(fd, keeping: keep, path: url.path)
        } catch {
            closeDescriptor(fd)
            throw error
        }
        self.url = url
        descriptor = fd
        size = kept
        self.bufferSize = bufferSize
        hasher = kept == 0 ? StreamingSHA256() : nil
        if bufferSize > 0 { buffer.reserveCapacity(bufferSize) }
    }

    /// Places the descriptor after the bytes that count as written: all it holds, or `keeping` of them, cutting the
    /// rest. The cut is made only when there is something to cut: on ext4 a truncate, even of an empty file to 0,
    /// marks it for a flush of all its pages at the next close of any descriptor of it (a reader's), which then
    /// waits for the whole write's fsync.
    private static func position(_ fd: Int32, keeping: Int64?, path: String) throws -> Int64 {
        let end = lseek(fd, 0, SEEK_END)
        guard end >= 0 else { throw DurableFile.posixError("cannot open", path) }
        guard let keeping else { return Int64(end) }
        guard Int64(end) >= keeping else {
            throw FerryError(
                .io, "the file holds \(end) bytes, fewer than the \(keeping) kept; start again", path: path)
        }
        if Int64(end) > keeping {
            guard ftruncate(fd, off_t(keeping)) == 0 else { throw DurableFile.posixError("cannot truncate", path) }
        }
        guard lseek(fd, off_t(keeping), SEEK_SET) >= 0 else { throw DurableFile.posixError("cannot seek", path) }
        return keeping
    }

    deinit { if !closed { closeDescriptor(descriptor) } }

    /// Reads the kept bytes from disk, in pieces of up to a MiB.
    public func readKept(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        guard kept > 0 else { return }
        let fd = systemOpen(url.path, O_RDONLY | O_CLOEXEC, 0)
        guard fd >= 0 else { throw DurableFile.posixError("cannot open", url.path) }
        defer { closeDescriptor(fd) }
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(min(kept, 1 << 20)), alignment: 16)
        defer { chunk.deallocate() }
        var remaining = kept
        while remaining > 0 {
            let n = read(fd, chunk.baseAddress!, Int(min(remaining, Int64(chunk.count))))
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw DurableFile.posixError("cannot read", url.path) }
            guard n > 0 else {
                throw FerryError(.io, "the file is shorter than the \(kept) bytes kept; start again", path: url.path)
            }
            try body(UnsafeRawBufferPointer(rebasing: chunk[..<n]))
            remaining -= Int64(n)
        }
    }

    /// Hashes the kept bytes from disk now, so that the file is hashed as it is written from here on.
    public func hashKept() throws {
        var hasher = StreamingSHA256()
        try readKept { hasher.update($0) }
        self.hasher = hasher
    }

    /// Feeds `bytes` to the hash, in the order they are written.
    public func hash(_ bytes: UnsafeRawBufferPointer) {
        hasher?.update(bytes)
    }

    /// Writes `bytes` after what is buffered: a small piece goes into the buffer, a big one straight to the file.
    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        size += Int64(bytes.count)
        if bytes.count < bufferSize / 2 {
            buffer.append(bytes.assumingMemoryBound(to: UInt8.self))
            if buffer.count >= bufferSize { try flush() }
            return
        }
        try flush()
        try DurableFile.writeAll(bytes, to: descriptor, path: url.path)
    }

    /// Hashes and writes `bytes`.
    public func append(_ bytes: UnsafeRawBufferPointer) throws {
        hash(bytes)
        try write(bytes)
    }

    /// Writes what is buffered.
    public func flush() throws {
        guard !buffer.isEmpty else { return }
        try buffer.withUnsafeBytes { try DurableFile.writeAll($0, to: descriptor, path: url.path) }
        buffer.removeAll(keepingCapacity: true)
    }

    /// Writes what is buffered and fsyncs: what arrived survives a crash.
    public func sync() throws {
        try flush()
        guard fsync(descriptor) == 0 else { throw DurableFile.posixError("cannot fsync", url.path) }
    }

    /// Cuts the file back to `size` bytes and fsyncs it; the file is hashed from disk at the end.
    public func truncate(to size: Int64) throws {
        try flush()
        hasher = nil
        self.size = size
        guard ftruncate(descriptor, off_t(size)) == 0 else { throw DurableFile.posixError("cannot truncate", url.path) }
        // The next write goes right after the cut (a descriptor not opened for appending keeps its position).
        guard lseek(descriptor, off_t(size), SEEK_SET) >= 0 else {
            throw DurableFile.posixError("cannot seek", url.path)
        }
        guard fsync(descriptor) == 0 else { throw DurableFile.posixError("cannot fsync", url.path) }
    }

    /// Writes what is buffered, fsyncs and closes: the bytes survive a power cut.
    public func close() throws {
        guard !closed else { return }
        defer {
            closed = true
            closeDescriptor(descriptor)
        }
        try sync()
    }

    /// The SHA-256 and size of what was written (after the last write), read from disk when the kept bytes were not
    /// hashed.
    public func digest() throws -> Written {
        if let hasher { return Written(sha256: hasher.finalizeHex(), size: size) }
        if !closed { try flush() }
        return Written(sha256: try FileDigest.sha256Hex(of: url), size: size)
    }

    /// ``close()``, then checks the file against `expected`: a mismatch throws `FerryError.Code.verification` naming
    /// the file (the caller deletes or keeps it).
    @discardableResult
    public func finish(expecting expected: Expected = Expected()) throws -> Written {
        try close()
        let written = try digest()
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

    /// Renames the finished file over `target` and fsyncs the directory.
    public func commit(to target: URL) throws {
        try DurableFile.rename(url, to: target)
    }

    /// Closes and deletes the file (an abandoned or refused transfer). Nothing is reported: a leftover temp file is
    /// swept later.
    public func discard() {
        if !closed { closeDescriptor(descriptor) }
        closed = true
        unlink(url.path)
    }
}

@inline(__always)
private func systemOpen(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 {
    open(path, flags, mode)
}

@inline(__always)
private func closeDescriptor(_ fd: Int32) {
    _ = close(fd)
}
