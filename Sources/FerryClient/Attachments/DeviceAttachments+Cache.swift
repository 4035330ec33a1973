import FerryCore
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

extension DeviceAttachments {
    /// One attachment file on the device.
    struct HeldFile: Sendable, Equatable {
        var sha256: String
        var size: Int64
        /// Last use, for the LRU: the file's modification time, set when it is stored and each time it is asked for.
        var lastUsed: Date
    }

    /// What ``prune(named:queued:cacheBytes:now:)`` removed.
    struct Pruned: Sendable, Equatable {
        /// Attachments no row names and none queued.
        var unnamed: [String] = []
        /// On-demand attachments evicted to keep the cache under its cap, least recently used first.
        var evicted: [String] = []
    }

    /// The attachment files the device holds.
    func held() throws -> [HeldFile] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: root.path)
        } catch {
            guard FileManager.default.fileExists(atPath: root.path) else { return [] }
            throw FerryError(.io, "cannot list the attachments: \(error.localizedDescription)", path: root.path)
        }
        return names.filter(Attachment.isID).compactMap { name in
            var info = stat()
            guard stat(url(for: name).path, &info) == 0 else { return nil }  // removed meanwhile: not held
            #if canImport(Darwin)
                let seconds = Double(info.st_mtimespec.tv_sec) + Double(info.st_mtimespec.tv_nsec) / 1e9
            #else
                let seconds = Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9
            #endif
            return HeldFile(sha256: name, size: Int64(info.st_size), lastUsed: Date(timeIntervalSince1970: seconds))
        }
    }

    /// Marks `sha256` as used now (the LRU's clock). A file removed meanwhile is not an error.
    func touch(_ sha256: String, now: Date = Date()) {
        let seconds = now.timeIntervalSince1970
        var times = [
            timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - seconds.rounded(.down)) * 1e9)),
            timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - seconds.rounded(.down)) * 1e9)),
        ]
        // Only the LRU order depends on it: a file that cannot be touched is evicted a little early, nothing lost.
        _ = utimensat(AT_FDCWD, url(for: sha256).path, &times, 0)
    }

    /// Removes the attachments no row names (`named`: every name the live database holds, with its download mode)
    /// and none queued, then evicts on-demand ones, least recently used first, until they take at most `cacheBytes`.
    /// Eager and queued attachments are never evicted. Also removes temp files older than an hour (a crash's).
    func prune(named: [String: Attachment.Download], cacheBytes: Int64, now: Date = Date()) throws -> Pruned {
        var pruned = Pruned()
        var onDemand: [HeldFile] = []
        let files = try held()
        // Read after the files: an add writes its queue entry before its file, so every file listed that is being
        // added is seen as queued here.
        let queued = try queuedIDs()
        for file in files where !queued.contains(file.sha256) {
            switch named[file.sha256] {
            case nil:
                try remove(file.sha256)
                pruned.unnamed.append(file.sha256)
            case .onDemand: onDemand.append(file)
            case .eager: break
            }
        }
        var total = onDemand.reduce(0) { $0 + $1.size }
        for file in onDemand.sorted(by: { ($0.lastUsed, $0.sha256) < ($1.lastUsed, $1.sha256) }) {
            guard total > cacheBytes else { break }
            try remove(file.sha256)
            pruned.evicted.append(file.sha256)
            total -= file.size
        }
        removeStaleTemporaries(now: now)
        return pruned
    }

    private func remove(_ sha256: String) throws {
        let file = url(for: sha256)
        guard unlinkIfPresent(file) else { throw DurableFile.posixError("cannot remove the attachment", file.path) }
    }

    private func removeStaleTemporaries(now: Date) {
        // A copy or a download younger than an hour may still be running in another process.
        let names = (try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []  // listed above already
        for name in names where name.hasPrefix(".tmp-") {
            let file = root.appendingPathComponent(name)
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: file.path),  // gone meanwhile
                let modified = attributes[.modificationDate] as? Date, now.timeIntervalSince(modified) > 3600
            else { continue }
            _ = unlinkIfPresent(file)  // garbage either way: the next prune tries again
        }
    }
}
