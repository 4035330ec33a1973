import FerryCore
import Foundation

/// A small file system for disk-full tests: a tmpfs of `megabytes` mounted on a fresh directory (needs root, as
/// `scripts/test` and CI run), with a filler file that takes all but `freeBytes` when asked. Unmount with
/// ``unmount()``.
///
/// ```swift
/// let disk = try SmallDisk(megabytes: 16)
/// defer { disk.unmount() }
/// try disk.fill(leaving: 64 * 1024)
/// ```
public struct SmallDisk: Sendable {
    public let url: URL
    var filler: URL { url.appendingPathComponent(".filler") }

    public init(megabytes: Int) throws {
        guard getuid() == 0 else {
            throw FerryError(.badInput, "disk-full tests mount a tmpfs and must run as root (scripts/test and CI do)")
        }
        url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("ferry-disk-\(UUID().uuidString)")
        try DurableFile.makeDirectory(url)
        let result = try runProcess(URL(fileURLWithPath: "/bin/mount"), ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", url.path])
        guard result.status == 0 else { throw FerryError(.io, "cannot mount a tmpfs: \(result.stderr)", path: url.path) }
    }

    /// Bytes free on the file system now.
    public var freeBytes: Int64 {
        var info = statvfs()
        guard statvfs(url.path, &info) == 0 else { return -1 }
        return Int64(info.f_bavail) * Int64(info.f_frsize)
    }

    /// Writes a filler file so that about `bytes` stay free.
    public func fill(leaving bytes: Int64) throws {
        let size = max(0, freeBytes - bytes)
        guard FileManager.default.createFile(atPath: filler.path, contents: nil),
            let handle = FileHandle(forWritingAtPath: filler.path)
        else { throw FerryError(.io, "cannot create the filler file", path: filler.path) }
        defer { try? handle.close() }  // test set-up: a failed close shows up as the wrong free space below
        let chunk = Data(count: 1 << 20)
        var written: Int64 = 0
        while written + Int64(chunk.count) <= size {
            handle.write(chunk)
            written += Int64(chunk.count)
        }
        if size > written { handle.write(chunk.prefix(Int(size - written))) }
    }

    /// Removes the filler file: the space is back.
    public func free() throws {
        try DurableFile.remove(filler)
    }

    public func unmount() {
        // Test clean-up: a mount that cannot be removed is left for the OS, and must not fail the test.
        _ = try? runProcess(URL(fileURLWithPath: "/bin/umount"), ["-l", url.path])
        try? FileManager.default.removeItem(at: url)  // as above
    }
}
