import FerryCore
import NIOCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A read-only file descriptor shared by every response that streams the file; closed when the last reference
/// goes. Holding it keeps the bytes readable after retention unlinks the path, so a download in flight finishes.
final class OpenFile: Sendable {
    let descriptor: Int32
    /// Size from `fstat` when opened; files in the store are immutable.
    let size: Int64
    let path: String

    /// Opens `path` read-only. Returns nil when it does not exist (pruned meanwhile); throws on other errors.
    static func open(path: String) throws -> OpenFile? {
        let fd = systemOpen(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            let code = errno
            if code == ENOENT { return nil }
            throw FerryError(.io, "cannot open file: \(String(cString: strerror(code)))", path: path)
        }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let code = errno
            close(fd)
            throw FerryError(.io, "cannot stat file: \(String(cString: strerror(code)))", path: path)
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            throw FerryError(.store, "not a regular file", path: path)
        }
        return OpenFile(descriptor: fd, size: Int64(info.st_size), path: path)
    }

    private init(descriptor: Int32, size: Int64, path: String) {
        self.descriptor = descriptor
        self.size = size
        self.path = path
    }

    deinit { close(descriptor) }

    /// Reads exactly `count` bytes at `offset` (blocking: call it on a thread pool).
    func read(offset: Int64, count: Int, allocator: ByteBufferAllocator) throws -> ByteBuffer {
        var buffer = allocator.buffer(capacity: count)
        var done = 0
        while done < count {
            var failure: Int32 = 0
            let n = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count - done) { pointer in
                var result: Int
                repeat {
                    result = pread(descriptor, pointer.baseAddress, count - done, off_t(offset) + off_t(done))
                } while result < 0 && errno == EINTR
                if result < 0 { failure = errno }
                return max(result, 0)
            }
            if failure != 0 {
                throw FerryError(.io, "cannot read file: \(String(cString: strerror(failure)))", path: path)
            }
            if n == 0 {
                throw FerryError(.io, "file ended at offset \(offset + Int64(done)) of \(size) bytes", path: path)
            }
            done += n
        }
        return buffer
    }

    /// The file's size now, from `fstat` (nil if that fails). Store files never change once written; this is for
    /// noticing one damaged in place.
    func currentSize() -> Int64? {
        var info = stat()
        return fstat(descriptor, &info) == 0 ? Int64(info.st_size) : nil
    }

    /// SHA-256 hex of the whole file, read through this descriptor (blocking).
    func sha256Hex() throws -> String {
        var hasher = FileHasher()
        var offset: Int64 = 0
        let allocator = ByteBufferAllocator()
        while offset < size {
            let count = Int(min(Int64(1 << 20), size - offset))
            let buffer = try read(offset: offset, count: count, allocator: allocator)
            buffer.withUnsafeReadableBytes { hasher.update($0) }
            offset += Int64(count)
        }
        return hasher.finalizeHex()
    }
}

private func systemOpen(_ path: String, _ flags: Int32) -> Int32 {
    #if canImport(Glibc)
        return Glibc.open(path, flags)
    #else
        return Darwin.open(path, flags)
    #endif
}
