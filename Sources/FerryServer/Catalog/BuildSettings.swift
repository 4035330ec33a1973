import FerryStore
import Foundation

/// How a server makes files on request (``BuildLane``, ``BuildCache``): whole files of versions stored as steps for
/// clients that ask for one whole, and catch-up patches. `ferry serve --cache-dir` and `--cache-size` set the first
/// two.
///
/// ```swift
/// var builds = BuildSettings()
/// builds.directory = URL(fileURLWithPath: "/var/cache/ferry")
/// builds.cacheLimit = 16 << 30
/// ```
public struct BuildSettings: Sendable, Equatable {
    /// Where the files are made and kept. Default (nil): `STORE/.ferry-cache` beside a store directory; a store of
    /// another kind must name one (FerryService names the bucket replica's cache).
    public var directory: URL?
    /// Bytes the cache keeps at most; the least recently used files go first. Default 4 GiB.
    public var cacheLimit: Int64 = 4 << 30
    /// Builds and merges at once. Default: half the cores, at least one.
    public var slots: Int = BuildLane.defaultSlots
    /// Requests waiting for a slot at most; one more is answered `503` with `Retry-After`. Default 256.
    public var maxWaiting: Int = 256

    public init() {}

    /// The cache directory for `store`: ``directory``, else `.ferry-cache` in a store directory, else a directory of
    /// this process's own in the system's temp directory (a store that is neither: tests' own stores).
    func cacheDirectory(for store: any SnapshotStore) -> URL {
        if let directory { return directory }
        if let files = store as? FileSnapshotStore {
            return files.root.appendingPathComponent(".ferry-cache", isDirectory: true)
        }
        return FileManager.default.temporaryDirectory.appendingPathComponent(
            "ferry-cache-\(ProcessInfo.processInfo.processIdentifier)", isDirectory: true)
    }
}
