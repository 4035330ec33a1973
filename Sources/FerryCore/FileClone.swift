import Foundation

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#endif

/// Copies a file as cheaply as the file system allows: a clone that shares blocks until either copy is written
/// (APFS `clonefile`, Linux `FICLONE` on btrfs and XFS), else a plain copy. The copy is fsynced either way.
///
/// ```swift
/// try FileClone.clone(directory.database, to: scratch)
/// ```
public enum FileClone {
    /// What the copy cost: a clone shares the source's blocks.
    public enum Method: String, Sendable { case clone, copy }

    /// Thrown by ``clone(_:to:_:fix:durable:shouldStop:)`` when `shouldStop` asked it to stop.
    public struct Stopped: Error {}

    /// Clones or copies `source` to `target` (replacing it) and fsyncs it; a failed copy is removed at once and
    /// reported as `what`, with `fix` as the remedy. With `durable: false` the fsync is left to the caller (a file
    /// it will change and fsync anyway). A copy asks `shouldStop` between pieces of 64 MiB and, when it answers
    /// true, removes what it copied and throws ``Stopped``.
    @discardableResult
    public static func clone(
        _ source: URL, to target: URL, _ what: String, fix: String, durable: Bool = true,
        shouldStop: @escaping () -> Bool = { false }
    ) throws -> Method {
        try DurableFile.remove(target)
        var method = Method.copy
        #if canImport(Darwin)
            if clonefile(source.path, target.path, 0) == 0 { method = .clone }
        #elseif os(Linux)
            if linuxClone(source.path, target.path) { method = .clone }
        #endif
        do {
            if method == .copy {
                #if os(Linux)
                    try kernelCopy(source, to: target, shouldStop: shouldStop)
                #else
                    try FileManager.default.copyItem(at: source, to: target)
                #endif
            }
            if durable { try DurableFile.sync(target) }
        } catch {
            // a partial copy must not hold on to its space; this error is the one to report
            try? FileManager.default.removeItem(at: target)
            if error is Stopped { throw error }
            // already names the file
            if let ferry = error as? FerryError, !FerryError.isOutOfSpace(ferry) { throw ferry }
            throw FerryError.writing(error, what, target, fix: fix)
        }
        return method
    }

    /// Copies `source` to `target` and fsyncs it. On any failure the partial copy is removed at once (it must not
    /// hold on to the space it took), and a full disk is a ``FerryError/Code/diskFull`` error saying `what` and `fix`.
    public static func copyDurably(_ source: URL, to target: URL, _ what: String, fix: String) throws {
        do {
            try FileManager.default.copyItem(at: source, to: target)
            try DurableFile.sync(target)
        } catch {
            try? FileManager.default.removeItem(at: target)  // the copy's (or sync's) error is the one to report
            // already names the file
            if let ferry = error as? FerryError, !FerryError.isOutOfSpace(ferry) { throw ferry }
            throw FerryError.writing(error, what, target, fix: fix)
        }
    }

    #if os(Linux)
        /// Copies inside the kernel with `sendfile(2)` (no round trip through user memory; Foundation's copy reads and
        /// writes in small chunks, several times slower on a large file).
        private static func kernelCopy(_ source: URL, to target: URL, shouldStop: () -> Bool) throws {
            let input = open(source.path, O_RDONLY | O_CLOEXEC)
            guard input >= 0 else { throw DurableFile.posixError("cannot open", source.path) }
            defer { close(input) }
            let output = open(target.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard output >= 0 else { throw DurableFile.posixError("cannot create", target.path) }
            defer { close(output) }
            var total = 0
            while true {
                if shouldStop() { throw Stopped() }
                let copied = sendfile(output, input, nil, 64 << 20)
                if copied == 0 { return }
                if copied > 0 {
                    total += copied
                    continue
                }
                if errno == EINTR { continue }
                if total == 0, [EXDEV, ENOSYS, EOPNOTSUPP, EINVAL].contains(errno) {
                    // A kernel or file system that cannot: copy through user memory (the empty file is unlinked; its
                    // descriptor closes on return; a failed unlink is harmless, copyItem reports any real problem).
                    try? FileManager.default.removeItem(at: target)
                    try FileManager.default.copyItem(at: source, to: target)
                    return
                }
                throw DurableFile.posixError("cannot copy \(source.lastPathComponent) to", target.path)
            }
        }

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
