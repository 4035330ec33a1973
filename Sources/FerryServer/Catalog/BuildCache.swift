import FerryCore
import Foundation

/// The files a server makes on request, `DIRECTORY/DATASET/<name>`: a version stored as a step built whole for a
/// client that asks for it whole (`<sha256>.sqlite` and its `.gz`), and catch-up patches (`catch-up-…`). Bounded
/// by ``limit`` bytes: after each file made, the least recently used ones go until the rest fit (a download that
/// holds one open keeps reading it). The directory is the server's own (`ferry serve --cache-dir`, by default
/// `STORE/.ferry-cache`, never the system's temp directory); what a restart finds there is counted and reused.
///
/// ```swift
/// let cache = BuildCache(root: store.appendingPathComponent(".ferry-cache"), limit: 8 << 30)
/// cache.added(dataset: "trips", key: sha256)
/// ```
final class BuildCache: Sendable {
    /// Bytes, hits and misses for the status page.
    struct Usage: Sendable, Equatable, Codable {
        var bytes: Int64 = 0
        var limit: Int64 = 0
        var files: Int = 0
        var hits: Int = 0
        var misses: Int = 0

        /// Hits per request for a file made on request; nil before any.
        var hitRate: Double? { hits + misses > 0 ? Double(hits) / Double(hits + misses) : nil }
    }

    private struct Entry {
        var bytes: Int64
        var lastUse: UInt64
    }

    private struct State {
        /// By `DATASET/KEY`, KEY being a file's name up to its first dot.
        var entries: [String: Entry] = [:]
        var clock: UInt64 = 0
        /// Per dataset.
        var hits: [String: Int] = [:]
        var misses: [String: Int] = [:]
    }

    let root: URL
    /// Bytes the cache keeps at most.
    let limit: Int64
    private let state = Locked(State())

    /// Counts what `root` already holds (a server restarted on its cache reuses it).
    init(root: URL, limit: Int64) {
        self.root = root.standardizedFileURL
        self.limit = max(0, limit)
        let datasets = (try? FileManager.default.contentsOfDirectory(atPath: self.root.path)) ?? []  // none yet
        state.withLock { state in
            for dataset in datasets {
                for key in Self.keys(in: directory(dataset)) {
                    state.entries["\(dataset)/\(key)"] = Entry(bytes: bytes(dataset: dataset, key: key), lastUse: 0)
                }
            }
        }
    }

    /// Where dataset `dataset`'s files are made.
    func directory(_ dataset: String) -> URL { root.appendingPathComponent(dataset, isDirectory: true) }

    /// A request found `key` made already.
    func hit(dataset: String, key: String) {
        state.withLock { state in
            state.hits[dataset, default: 0] += 1
            state.clock += 1
            state.entries["\(dataset)/\(key)"]?.lastUse = state.clock
        }
    }

    /// A request had to wait for `key` to be made.
    func miss(dataset: String) { state.withLock { $0.misses[dataset, default: 0] += 1 } }

    /// Counts the files of `key` just made, then evicts the least recently used others until the cache fits.
    /// Returns the keys evicted (`DATASET/KEY`), whose open entries the caller forgets.
    @discardableResult
    func added(dataset: String, key: String) -> [String] {
        let size = bytes(dataset: dataset, key: key)
        let victims: [String] = state.withLock { state in
            state.clock += 1
            let name = "\(dataset)/\(key)"
            state.entries[name] = Entry(bytes: size, lastUse: state.clock)
            var total = state.entries.values.reduce(Int64(0)) { $0 + $1.bytes }
            var victims: [String] = []
            for (other, entry) in state.entries.sorted(by: { $0.value.lastUse < $1.value.lastUse })
            where total > limit && other != name {
                victims.append(other)
                total -= entry.bytes
            }
            for victim in victims { state.entries[victim] = nil }
            return victims
        }
        for victim in victims { remove(victim) }
        return victims
    }

    /// Removes dataset `dataset`'s files whose key `keeping` does not contain (`nil`: all of them), and scratch left
    /// by a killed build. Returns the keys removed.
    @discardableResult
    func prune(dataset: String, keeping: (String) -> Bool) -> [String] {
        let directory = directory(dataset)
        var removed: [String] = []
        for key in Self.keys(in: directory) where !keeping(key) {
            state.withLock { _ = $0.entries.removeValue(forKey: "\(dataset)/\(key)") }
            remove("\(dataset)/\(key)")
            removed.append(key)
        }
        let tmp = directory.appendingPathComponent("tmp", isDirectory: true)
        // No tmp/ means nothing is left over.
        for name in (try? FileManager.default.contentsOfDirectory(atPath: tmp.path)) ?? [] {
            // A leftover of a killed build; a failed removal is retried by the next prune.
            try? DurableFile.remove(tmp.appendingPathComponent(name))
        }
        return removed
    }

    /// Dataset `dataset`'s bytes, files, hits and misses now (``limit`` is the whole cache's).
    func usage(dataset: String) -> Usage {
        state.withLock { state in
            let mine = state.entries.filter { $0.key.hasPrefix("\(dataset)/") }.values
            return Usage(
                bytes: mine.reduce(0) { $0 + $1.bytes }, limit: limit, files: mine.count,
                hits: state.hits[dataset] ?? 0, misses: state.misses[dataset] ?? 0)
        }
    }

    /// The keys of the files in `directory` (names up to their first dot), scratch excluded.
    private static func keys(in directory: URL) -> Set<String> {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []  // none made yet
        return Set(names.filter { $0 != "tmp" }.map { String($0.prefix { $0 != "." }) })
    }

    /// The files of `key` in dataset `dataset`'s directory.
    private func files(dataset: String, key: String) -> [URL] {
        let directory = directory(dataset)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []  // gone already
        return names.filter { $0 != "tmp" && $0.prefix(while: { $0 != "." }) == key }.map {
            directory.appendingPathComponent($0)
        }
    }

    private func bytes(dataset: String, key: String) -> Int64 {
        files(dataset: dataset, key: key).reduce(0) { total, url in
            // A file removed meanwhile counts nothing.
            total + ((try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.int64Value ?? 0)
        }
    }

    /// Deletes the files of `DATASET/KEY`; a file a download holds open stays readable until it is closed.
    private func remove(_ name: String) {
        let parts = name.split(separator: "/", maxSplits: 1).map(String.init)
        guard parts.count == 2 else { return }
        for url in files(dataset: parts[0], key: parts[1]) {
            // A failed removal leaves a file the next prune of its dataset removes.
            try? DurableFile.remove(url)
        }
    }
}
