import FerryCore
import Foundation

/// A small file system for disk-full tests: a tmpfs (or ext2, see ``FileSystem``) of `megabytes` mounted on a fresh
/// directory (needs root, as `scripts/test` and CI run), with a filler file that takes all but `freeBytes` when
/// asked. Unmount with ``unmount()``.
///
/// ```swift
/// let disk = try SmallDisk(megabytes: 16)
/// defer { disk.unmount() }
/// try disk.fill(leaving: 64 * 1024)
/// ```
public struct SmallDisk: Sendable {
    /// The kind of file system to mount.
    public enum FileSystem: Sendable {
        /// A tmpfs of the given size.
        case tmpfs
        /// ext2 in an image file mounted through a loop device (`mkfs.ext2` from e2fsprogs): unlike tmpfs it limits
        /// the hard links of one file (65,000), so a test can make `link(2)` fail with `EMLINK` on one file system.
        case ext2
    }

    public let url: URL
    /// The ext2 image behind the mount, nil for a tmpfs.
    let image: URL?
    var filler: URL { url.appendingPathComponent(".filler") }

    public init(megabytes: Int, fileSystem: FileSystem = .tmpfs) throws {
        guard getuid() == 0 else {
            throw FerryError(
                .badInput, "disk-full tests mount a file system and must run as root (scripts/test and CI do)")
        }
        url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("ferry-disk-\(UUID().uuidString)")
        try DurableFile.makeDirectory(url)
        switch fileSystem {
        case .tmpfs:
            image = nil
            let result = try runProcessBlocking(
                URL(fileURLWithPath: "/bin/mount"), ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", url.path])
            guard result.status == 0 else {
                throw FerryError(.io, "cannot mount a tmpfs: \(result.stderr)", path: url.path)
            }
        case .ext2:
            let file = URL(fileURLWithPath: url.path + ".img")
            image = file
            guard FileManager.default.createFile(atPath: file.path, contents: nil),
                truncate(file.path, off_t(megabytes) << 20) == 0
            else {
                throw FerryError(.io, "cannot create the ext2 image", path: file.path)
            }
            guard
                let mkfs = ["/sbin/mkfs.ext2", "/usr/sbin/mkfs.ext2"].first(where: {
                    FileManager.default.isExecutableFile(atPath: $0)
                })
            else {
                throw FerryError(.notFound, "mkfs.ext2 is missing: install e2fsprogs (apt-get install e2fsprogs)")
            }
            let made = try runProcessBlocking(URL(fileURLWithPath: mkfs), ["-q", "-F", "-m", "0", file.path])
            guard made.status == 0 else { throw FerryError(.io, "mkfs.ext2 failed: \(made.stderr)", path: file.path) }
            let result = try runProcessBlocking(
                URL(fileURLWithPath: "/bin/mount"), ["-o", "loop", file.path, url.path])
            guard result.status == 0 else {
                throw FerryError(
                    .io, "cannot mount the ext2 image through a loop device: \(result.stderr)", path: url.path)
            }
        }
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
        _ = try? runProcessBlocking(URL(fileURLWithPath: "/bin/umount"), ["-l", url.path])
        try? FileManager.default.removeItem(at: url)  // as above
        if let image { try? FileManager.default.removeItem(at: image) }  // as above
    }
}
