#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif
import FerryCore
import Foundation

/// Copies a file as cheaply as the file system allows: a clone that shares blocks until either copy is written
/// (APFS `clonefile`, Linux `FICLONE` on btrfs and XFS), else a plain copy. The copy is fsynced either way.
///
/// ```swift
/// try FileClone.clone(directory.database, to: scratch)
/// ```
enum FileClone {
    /// What the copy cost: a clone shares the source's blocks.
    enum Method: String, Sendable { case clone, copy }

    @discardableResult
    static func clone(_ source: URL, to target: URL) throws -> Method {
        try DurableFile.remove(target)
        var method = Method.copy
        #if canImport(Darwin)
        if clonefile(source.path, target.path, 0) == 0 { method = .clone }
        #elseif os(Linux)
        if linuxClone(source.path, target.path) { method = .clone }
        #endif
        if method == .copy {
            try copyDurably(
                source, to: target, "cannot copy the database for the patch",
                fix: "free space and fetch again (database.db and any pending update are unchanged)")
        } else {
            do {
                try DurableFile.sync(target)
            } catch {
                try? FileManager.default.removeItem(at: target)  // a clone that is not durable is not kept; the sync's error is the one to report
                throw error
            }
        }
        return method
    }

    /// Copies `source` to `target` and fsyncs it. On any failure the partial copy is removed at once (it must not
    /// hold on to the space it took), and a full disk is a ``FerryError/Code/diskFull`` error saying `what` and `fix`.
    static func copyDurably(_ source: URL, to target: URL, _ what: String, fix: String) throws {
        do {
            try FileManager.default.copyItem(at: source, to: target)
            try DurableFile.sync(target)
        } catch {
            try? FileManager.default.removeItem(at: target)  // the copy's (or sync's) error is the one to report
            if let ferry = error as? FerryError, !FerryError.isOutOfSpace(ferry) { throw ferry }  // already names the file
            throw FerryError.writing(error, what, target, fix: fix)
        }
    }

    #if os(Linux)
    /// `ioctl(FICLONE)`; false where the file system cannot clone (ext4, tmpfs, across devices).
    private static func linuxClone(_ source: String, _ target: String) -> Bool {
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { return false }
        defer { close(input) }
        let output = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard output >= 0 else { return false }
        let ficlone: UInt = 0x4004_9409  // _IOW(0x94, 9, int)
        let cloned = ioctl(output, ficlone, input) == 0
        close(output)
        if !cloned { unlink(target) }
        return cloned
    }
    #endif
}
