import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The "write to a temp file, fsync, rename" discipline in one place (Litestream's PATTERNS.md rule).
/// A crash at any instant leaves either the old file or the new one, never a mix.
///
/// ```swift
/// try DurableFile.write(Data("{}".utf8), to: URL(fileURLWithPath: "/store/x/manifest.json"))
/// ```
public enum DurableFile {
    /// Writes `data` to a temp file beside `url`, fsyncs it, renames it over `url` and fsyncs the directory.
    ///
    /// `syncingDirectory: false` skips the directory's fsync, for a file that replaces one whose old contents are as
    /// good after a power loss (the rename may then be undone, never torn).
    public static func write(_ data: Data, to url: URL, syncingDirectory: Bool = true) throws {
        let dir = url.deletingLastPathComponent()
        let temp = dir.appendingPathComponent(".\(url.lastPathComponent).\(UUID().uuidString).tmp")
        do {
            let fd = open(temp.path, O_WRONLY | O_CREAT | O_EXCL, 0o644)
            guard fd >= 0 else { throw posixError("cannot create", temp.path) }
            defer { close(fd) }
            try data.withUnsafeBytes { raw in try writeAll(raw, to: fd, path: temp.path) }
            guard fsync(fd) == 0 else { throw posixError("cannot fsync", temp.path) }
        } catch {
            unlink(temp.path)
            throw error
        }
        guard Foundation.rename(temp.path, url.path) == 0 else {
            let error = posixError("cannot rename \(temp.lastPathComponent) to", url.path)
            unlink(temp.path)
            throw error
        }
        if syncingDirectory { try syncDirectory(dir) }
    }

    /// Writes all of `bytes` to descriptor `fd` (at its offset, or appending when opened so), retrying short writes
    /// and interrupted ones; an error names `path`.
    ///
    /// ```swift
    /// try data.withUnsafeBytes { try DurableFile.writeAll($0, to: fd, path: url.path) }
    /// ```
    public static func writeAll(_ bytes: UnsafeRawBufferPointer, to fd: Int32, path: String) throws {
        var offset = 0
        while offset < bytes.count {
            let n = systemWrite(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                throw posixError("cannot write", path)
            }
            offset += n
        }
    }

    /// Fsyncs a file's contents to stable storage.
    public static func sync(_ url: URL) throws {
        let fd = open(url.path, O_RDONLY)
        guard fd >= 0 else { throw posixError("cannot open", url.path) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw posixError("cannot fsync", url.path) }
    }

    /// Atomically renames `from` over `to` (same file system) and fsyncs the destination directory.
    public static func rename(_ from: URL, to: URL) throws {
        guard Foundation.rename(from.path, to.path) == 0 else {
            throw posixError("cannot rename \(from.lastPathComponent) to", to.path)
        }
        try syncDirectory(to.deletingLastPathComponent())
    }

    /// Fsyncs a directory so that renames and unlinks inside it are durable.
    public static func syncDirectory(_ url: URL) throws {
        let fd = open(url.path, O_RDONLY)
        guard fd >= 0 else { throw posixError("cannot open directory", url.path) }
        defer { close(fd) }
        // Some file systems refuse fsync on directories (EINVAL); nothing more can be done there.
        if fsync(fd) != 0 && errno != EINVAL { throw posixError("cannot fsync directory", url.path) }
    }

    /// Creates a directory (and parents) if missing.
    public static func makeDirectory(_ url: URL) throws {
        do {
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        } catch {
            throw FerryError(.io, "cannot create directory: \(error.localizedDescription)", path: url.path)
        }
    }

    /// Removes a file or a directory tree; one already gone is fine (another cleanup got there first).
    public static func remove(_ url: URL) throws {
        guard FileManager.default.fileExists(atPath: url.path) else { return }
        do {
            try FileManager.default.removeItem(at: url)
        } catch {
            throw FerryError(.io, "cannot remove: \(error.localizedDescription)", path: url.path)
        }
    }

    /// An error for the current `errno`, naming the path and what to do when the disk is full.
    public static func posixError(_ what: String, _ path: String) -> FerryError {
        let code = errno
        var message = "\(what): \(String(cString: strerror(code)))"
        if code == ENOSPC { message += "; the disk is full: free space and try again" }
        return FerryError(.io, message, path: path)
    }
}

@inline(__always)
private func systemWrite(_ fd: Int32, _ buf: UnsafeRawPointer, _ count: Int) -> Int {
    write(fd, buf, count)
}

/// An exclusive advisory lock on a file (`flock`), held until ``unlock()`` or deinit.
/// Used so that two publishers on the same dataset never race, and two clients on one directory.
///
/// ```swift
/// let lock = try FileLock(path: "/store/campgrounds/.lock", wait: false)
/// defer { lock.unlock() }
/// ```
public final class FileLock: Sendable {
    /// The open lock file's descriptor, -1 once unlocked: behind a lock, so two threads that call ``unlock()`` at
    /// once release and close it exactly once.
    private let descriptor: Locked<Int32>
    public let path: String

    /// Takes the lock. With `wait: false` throws at once when another process holds it.
    public init(path: String, wait: Bool) throws {
        self.path = path
        let fd = open(path, O_RDWR | O_CREAT, 0o644)
        guard fd >= 0 else { throw DurableFile.posixError("cannot open lock file", path) }
        var rc: Int32
        repeat { rc = flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) } while rc != 0 && errno == EINTR
        if rc != 0 {
            let busy = errno == EWOULDBLOCK
            close(fd)
            if busy {
                throw FerryError(
                    .store,
                    "another ferry process holds this lock (is a publish already running?); wait for it to finish",
                    path: path)
            }
            throw DurableFile.posixError("cannot lock", path)
        }
        descriptor = Locked(fd)
    }

    /// Releases the lock and closes the file; a second call does nothing.
    public func unlock() {
        descriptor.withLock { fd in
            guard fd >= 0 else { return }
            flock(fd, LOCK_UN)
            close(fd)
            fd = -1
        }
    }

    deinit { unlock() }
}
