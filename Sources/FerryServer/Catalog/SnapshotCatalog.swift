import FerryCore
import FerryStore
import Foundation
import HTTPTypes
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle

/// The server's in-memory view of the store: each dataset's current manifest, its retained versions with their
/// files held open and their header values precomputed. A `Service` that polls every `manifest.json`
/// (inode, size, mtime) at the configured interval (at most 1 s) and swaps in the new state, so requests never
/// touch the file system except to read body bytes.
///
/// Only files named by a manifest and its version records are opened, and only after the manifest that names
/// them was renamed into place, so a half-written file is never served. A version dropped by retention stays
/// readable for the downloads that hold its ``OpenFile``.
///
/// ```swift
/// let catalog = SnapshotCatalog(store: FileSnapshotStore(root: url), pollInterval: .milliseconds(500), logger: logger)
/// try await catalog.refresh()
/// let manifest = catalog.dataset("campgrounds")?.manifest
/// ```
public final class SnapshotCatalog: Service, Sendable {
    struct State: Sendable {
        var datasets: [String: DatasetState] = [:]
        /// The schema lines of each dataset published in lines, by base name (``SchemaLines``).
        var lines: [String: SchemaLines] = [:]
        var listBody = ByteBuffer(string: #"{"datasets":[]}"#)
        /// Manifests that failed to load, by dataset, so a broken file is reported once, not every poll.
        var failed: [String: StoreRevision] = [:]
        /// When the last poll finished (for the status page).
        var lastPoll: Date?
    }

    let store: any SnapshotStore
    /// The lane of the whole-file builds and catch-up merges made on request (``BuildLane``).
    let lane: BuildLane
    /// Versions stored as steps, built whole only when a client asks for one whole (``VersionBuilds``), into the
    /// build cache (``BuildCache``: `DIRECTORY/DATASET/`), where catch-up patches are made too.
    let builds: VersionBuilds
    let pollInterval: Duration
    let logger: Logger
    let metrics: ServerMetrics?
    /// The manifest long-polls, woken by each reload that changes their dataset.
    let waiters = VersionWaiters()
    /// The devices seen per dataset in the last 24 h, for the status page.
    let devices = DeviceSightings()
    private let state = Locked(State())
    /// Held for the whole of ``refreshBlocking()`` (on the thread pool, where blocking is allowed).
    private let refreshing = NSLock()

    /// Creates an empty catalog; call ``refresh()`` once before serving, then run it as a service.
    /// `buildCache`: where files made on request go (default: `STORE/.ferry-cache` for a store directory),
    /// `cacheLimit` the bytes it keeps at most.
    public convenience init(
        store: any SnapshotStore, pollInterval: Duration, logger: Logger, buildCache: URL? = nil,
        cacheLimit: Int64 = BuildSettings().cacheLimit
    ) {
        var settings = BuildSettings()
        settings.directory = buildCache
        settings.cacheLimit = cacheLimit
        self.init(store: store, pollInterval: pollInterval, logger: logger, metrics: nil, builds: settings)
    }

    init(
        store: any SnapshotStore, pollInterval: Duration, logger: Logger, metrics: ServerMetrics?,
        builds settings: BuildSettings
    ) {
        self.store = store
        lane = BuildLane(slots: settings.slots, maxWaiting: settings.maxWaiting)
        builds = VersionBuilds(
            store: store, lane: lane,
            cache: BuildCache(root: settings.cacheDirectory(for: store), limit: settings.cacheLimit), logger: logger)
        self.pollInterval = pollInterval
        self.logger = logger
        self.metrics = metrics
    }

    /// The dataset's current state, or nil when it has no (loadable) manifest.
    func dataset(_ name: String) -> DatasetState? {
        state.withLock { $0.datasets[name] }
    }

    /// Who may read the dataset and which views it has (the part of ``dataset(_:)`` every request needs). Nil for a
    /// retired schema line, and for the base name of a dataset published in lines (a store that held it before its
    /// lines may still have its files): ``resolve(_:accepted:)`` answers both, so the channel's fast path, which
    /// asks this first, passes them on to it.
    func access(_ name: String) -> DatasetState.Access? {
        state.withLock { state in
            guard let dataset = state.datasets[name], dataset.retiredAt == nil, state.lines[name] == nil else {
                return nil
            }
            return dataset.access
        }
    }

    /// The layout and the retired keys of partitioned dataset `name`; nil for any other dataset (docs/partitions.md).
    func partitions(_ name: String) -> (layout: PartitionLayout, retired: Set<String>)? {
        state.withLock { state in
            state.datasets[name].flatMap { dataset in dataset.partitioning.map { ($0, dataset.retiredPartitions) } }
        }
    }

    /// The dataset a request for `name` reads (docs/schema-lines.md):
    /// - a dataset published from one template, and an unknown name: `name` itself;
    /// - a dataset published in lines: its newest live line among the schema versions the client accepts
    ///   (`accepted`, nil: any); `410` when the accepted lines are all retired, `404` when none was ever published;
    /// - a live line: `name`; a retired line: `410`, naming the lines still served.
    func resolve(_ name: String, accepted: Set<Int>?) throws -> String {
        guard let (base, schemaVersion) = DatasetName.split(name),
            let lines = state.withLock({ $0.lines[base] })
        else { return name }
        if let schemaVersion {
            if lines.retired.contains(schemaVersion) { throw lines.gone(base: base, asked: [schemaVersion]) }
            return name
        }
        if let best = lines.live.last(where: { accepted?.contains($0) ?? true }) {
            return DatasetName.line(base: base, schemaVersion: best)
        }
        let retired = lines.retired.filter { accepted?.contains($0) ?? true }
        if !retired.isEmpty { throw lines.gone(base: base, asked: retired) }
        throw ServerError(
            .notFound, code: .notFound,
            "dataset '\(base)' has no schema line this app accepts (it accepts \(SchemaLines.list(accepted.map { Array($0) } ?? []))); lines served: \(SchemaLines.list(lines.live))"
        )
    }

    /// `{"datasets":[<manifest>...]}`, sorted by name; a scoped dataset appears as `{"dataset":…,"scoped":true}`.
    var listBody: ByteBuffer { state.withLock { $0.listBody } }

    /// Current manifests of the public datasets, sorted by dataset name.
    public var manifests: [Manifest] {
        state.current.datasets.values.compactMap(\.everyone?.manifest).sorted { $0.dataset < $1.dataset }
    }

    /// `name@version` per dataset (`name@version (scoped: n)` for a scoped one), sorted: for logs.
    public var summary: [String] {
        state.current.datasets.sorted { $0.key < $1.key }.map { name, dataset in
            switch dataset.access {
            case .everyone(let view): "\(name)@\(view.manifest.version)"
            case .scoped(let views): "\(name)@\(dataset.lastVersion) (scoped: \(views.count))"
            }
        }
    }

    /// Polls until graceful shutdown. Load errors are logged and retried on the next poll.
    public func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: self.pollInterval) }
            } catch {
                break
            }
            do {
                try await refresh()
            } catch {
                logger.error("snapshot catalog refresh failed: \(error)")
            }
        }
    }

    /// Re-reads the store now (on NIO's thread pool) and swaps in what changed.
    public func refresh() async throws {
        try await NIOThreadPool.singleton.runIfActive { try self.refreshBlocking() }
    }

    /// Updates the per-dataset gauges (version, age) from the current state, and the count of waiting long-polls.
    func updateGauges(now: Date = Date()) {
        guard let metrics else { return }
        metrics.setWaiting(waiters.count)
        for (name, dataset) in state.current.datasets {
            metrics.setDataset(name, version: dataset.lastVersion, createdAt: dataset.createdAt, now: now)
        }
    }

    func refreshBlocking() throws {
        // One refresh at a time (the poll and ``StoreChanges``): each reads the state the previous one swapped in,
        // so a slower refresh can never put back an older manifest after a newer one.
        refreshing.lock()
        defer { refreshing.unlock() }
        let names = try datasetNames()
        let before = state.current
        var datasets = before.datasets
        var failed = before.failed
        var changed = false
        // The datasets whose served state changes: their long-polls are woken once it is swapped in.
        var touched: [String] = []
        for name in names {
            guard let identity = store.manifestRevision(dataset: name) else {
                if datasets.removeValue(forKey: name) != nil {
                    changed = true
                    touched.append(name)
                }
                continue
            }
            let previous = datasets[name]
            if previous?.identity == identity || failed[name] == identity { continue }
            do {
                let loaded = try load(dataset: name, identity: identity, previous: previous)
                datasets[name] = loaded
                failed[name] = nil
                changed = true
                touched.append(name)
                if previous?.lastVersion != loaded.lastVersion || previous?.isScoped != loaded.isScoped {
                    var metadata: Logger.Metadata = [
                        "dataset": .string(name), "version": .stringConvertible(loaded.lastVersion),
                    ]
                    switch loaded.access {
                    case .everyone(let view):
                        metadata["retained"] = .string(view.manifest.versions.map(String.init).joined(separator: ","))
                    case .scoped(let views): metadata["scopes"] = .stringConvertible(views.count)
                    }
                    logger.info("serving dataset", metadata: metadata)
                }
            } catch {
                failed[name] = identity
                logger.warning(
                    "cannot load dataset; keeping what was served before and retrying when manifest.json changes",
                    metadata: ["dataset": .string(name), "error": .string("\(error)")])
            }
        }
        for name in datasets.keys where !names.contains(name) {
            datasets[name] = nil
            metrics?.removeDataset(name)
            changed = true
            touched.append(name)
        }
        if changed {
            let list = Self.listBody(datasets)
            let lines = SchemaLines.index(datasets.mapValues { $0.retiredAt != nil })
            state.withLock {
                $0.datasets = datasets
                $0.lines = lines
                $0.listBody = list
                $0.failed = failed
            }
            waiters.wake(touched)
        } else if failed != before.failed {
            state.withLock { $0.failed = failed }
        }
        state.withLock { $0.lastPoll = Date() }
        updateGauges()
    }

    /// The datasets of the store. An unreadable store is an error, so a passing fault never makes the server drop
    /// every dataset.
    func datasetNames() throws -> Set<String> {
        do {
            return Set(try store.datasets())
        } catch var error as FerryError {
            error.message += "; serving what was loaded before"
            throw error
        }
    }

    static func listBody(_ datasets: [String: DatasetState]) -> ByteBuffer {
        var buffer = ByteBuffer(string: #"{"datasets":["#)
        // A retired schema line is not listed: it is gone.
        for (index, name) in datasets.keys.filter({ datasets[$0]!.retiredAt == nil }).sorted().enumerated() {
            if index > 0 { buffer.writeString(",") }
            switch datasets[name]!.access {
            case .everyone(let view):
                var body = view.manifestBody
                buffer.writeBuffer(&body)
            case .scoped where datasets[name]!.partitioning != nil:
                // Each stream's manifest is under the dataset's partitions (docs/partitions.md).
                buffer.writeString(#"{"dataset":"\#(name)","partitioned":true}"#)
            case .scoped:
                // Each scope's manifest is for its token holders only.
                buffer.writeString(#"{"dataset":"\#(name)","scoped":true}"#)
            }
        }
        buffer.writeString("]}")
        return buffer
    }
}

extension SnapshotCatalog {
    /// Every dataset's views with their retained records, the last poll time and the unreadable manifests: all the
    /// status page reads from the catalog.
    func statusSnapshot() -> CatalogStatus {
        let current = state.current
        let devices = self.devices.counts()
        let datasets = current.datasets.keys.sorted().map { name in
            let dataset = current.datasets[name]!
            let views: [SnapshotView]
            switch dataset.access {
            case .everyone(let view): views = [view]
            case .scoped(let byScope): views = byScope.keys.sorted().map { byScope[$0]! }
            }
            let usage = builds.cache.usage(dataset: name)
            let lane = lane.counts(dataset: name)
            let built = StatusReport.Builds(
                cacheBytes: usage.bytes, cacheLimit: usage.limit, files: usage.files, hits: usage.hits,
                misses: usage.misses, hitRate: usage.hitRate, buildsRunning: lane[.build]?.running ?? 0,
                buildsWaiting: lane[.build]?.waiting ?? 0, mergesRunning: lane[.merge]?.running ?? 0,
                mergesWaiting: lane[.merge]?.waiting ?? 0)
            return CatalogStatus.Dataset(
                name: name, scoped: dataset.isScoped, retired: dataset.retiredAt != nil, devices: devices[name] ?? 0,
                views: views.map {
                    .init(
                        manifest: $0.manifest,
                        retained: ($0.versions.values.map(\.record) + $0.steps.values.map(\.record)).sorted {
                            $0.version < $1.version
                        })
                }, history: dataset.history, builds: built)
        }
        return CatalogStatus(
            datasets: datasets, lastPoll: current.lastPoll, unreadableManifests: current.failed.keys.sorted())
    }
}
