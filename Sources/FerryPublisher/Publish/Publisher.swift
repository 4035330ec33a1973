import FerryCore
import FerryPostgres
import FerryStore
import Foundation
import Logging

/// Publishes a dataset: PostgreSQL → a verified SQLite snapshot → the next version in a ``FileSnapshotStore``.
///
/// One publish: take the dataset's lock (fail at once if another publisher holds it, unless
/// ``Configuration/waitForLock``), clean a crashed run's leftovers, export into the store's `tmp/`, and either
/// report "unchanged" (the data digest equals the latest version's; the temp file is deleted) or commit: checksum,
/// gzip copy, fsync, rename, manifest replaced atomically, versions beyond ``Configuration/keep`` pruned.
///
/// ```swift
/// let publisher = Publisher(
///     configuration: .init(templatePath: "templates/campgrounds.yml", databaseURL: url, store: URL(fileURLWithPath: "snapshots")),
///     logger: Logger(label: "ferry.publish"))
/// let result = try await publisher.publish()
/// print(result.version, result.sha256, result.unchanged)
/// ```
public struct Publisher: Sendable {
    /// What to publish and where. The template is re-read at every publish, so a schedule picks up edits.
    ///
    /// ```swift
    /// var configuration = Publisher.Configuration(templatePath: "templates/trips.yml", databaseURL: url, store: storeURL)
    /// configuration.keep = 3
    /// ```
    public struct Configuration: Sendable {
        /// Path of the template (`templates/campgrounds.yml`); the first of ``templatePaths``.
        public var templatePath: String {
            get { templatePaths[0] }
            set { templatePaths = [newValue] }
        }
        /// The templates published together: one, or one per schema line of a dataset (the same `dataset:`, distinct
        /// `schemaVersion:`; docs/schema-lines.md). Never empty.
        public var templatePaths: [String]
        /// libpq URL of the PostgreSQL database (`postgres://user:password@host:5432/db`). Never printed unredacted.
        public var databaseURL: String
        /// Root of the snapshot store. The CLI's default is `./snapshots`.
        public var store: URL
        /// Checkpoints to retain per scope, at least 1, with every version after the oldest of them. Default 5. With
        /// ``checkpointAt`` 0 every version is a checkpoint, so this counts versions.
        public var keep: Int
        /// Wait for another publisher on the same dataset to finish instead of failing at once. Default false.
        public var waitForLock: Bool
        /// Level of the stored gzip copy, deflated by ISA-L's igzip: 0 (fastest) … 3 (smallest). Default 2: on the
        /// 654 MB benchmark snapshot it deflated at 403 MB/s per core to 37.5 %, where zlib's fastest level managed
        /// 120 MB/s to 36.5 % (``Gzip/ChunkEncoding/igzip(level:)``).
        public var gzipLevel: Int
        /// Called as tables stream (from the publishing threads); nil for none. The CLI draws a terminal line.
        public var progress: (@Sendable (PublishProgress) -> Void)?
        /// Write row-level patches from every retained version to each new one (docs/delta.md). Default true.
        public var patches: Bool = true
        /// Build a scope's new file from its current version plus the row diff, where that version's row index
        /// allows (docs/delta.md). Default true; false builds every file from scratch (`ferry publish --full`).
        public var incremental: Bool = true
        /// For a template with `scope:`: how many scopes are exported at once, each on its own PostgreSQL
        /// connection sharing one snapshot. Default: the number of cores, at most 4.
        public var parallelism: Int = max(1, min(4, ProcessInfo.processInfo.activeProcessorCount))
        /// The store is a local cache of a store in a bucket (FerryBucket's `BucketPublisher`): a retained version's
        /// files may be only in the bucket, so committing writes the manifest without requiring every object it
        /// names on disk and leaves the cache's pruning to the caller. Default false.
        public var storeIsCache: Bool = false
        /// A new version is stored as a **step**, the patch from the previous version, instead of full files until
        /// the steps since the scope's last checkpoint pass this share of that checkpoint's gzip copy
        /// (docs/delta.md, "Checkpoints and steps"). 0 stores every version in full. Default 0.25.
        public var checkpointAt: Double = 0.25
        /// A checkpoint is also cut when the last one is this old. Default one day.
        public var checkpointEvery: Duration = .seconds(86_400)
        /// How long each scope keeps the history a device catches up from by one patch (docs/delta.md, "Catching
        /// up"): the steps of every version published within it. Zero keeps none beyond the retained versions.
        /// Default 30 days.
        public var patchHorizon: Duration = .seconds(30 * 86_400)
        /// Where the publisher keeps each scope's current file and the file it builds the next version from:
        /// `DIRECTORY/DATASET/`. Default `STORE/.ferry-work`.
        public var workDirectory: URL?
        /// How each scope's chain of versions is thinned as it ages (docs/delta.md, "A bounded history").
        public var tiers = HistoryTiers()
        /// The time a publish stamps its version with and ages the history by. Default: the system clock; a
        /// benchmark or test simulates months of publishes with its own.
        public var clock: @Sendable () -> Date = { Date() }

        public init(
            templatePath: String, databaseURL: String, store: URL, keep: Int = 5, waitForLock: Bool = false,
            gzipLevel: Int = 2,
            progress: (@Sendable (PublishProgress) -> Void)? = nil
        ) {
            self.templatePaths = [templatePath]
            self.databaseURL = databaseURL
            self.store = store
            self.keep = keep
            self.waitForLock = waitForLock
            self.gzipLevel = gzipLevel
            self.progress = progress
        }
    }

    public let configuration: Configuration
    let logger: Logger
    /// Test hook passed to the exporter: runs after each table while the PostgreSQL snapshot is open.
    var afterTable: (@Sendable (String) throws -> Void)?
    /// Test hook: called when another publish holds the dataset's lock and this one starts waiting for it
    /// (``Configuration/waitForLock``).
    var waitingForLock: (@Sendable () -> Void)?

    public init(configuration: Configuration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    /// Publishes once, on a thread of its own (libpq and SQLite block), and returns what is now current.
    ///
    /// With `changedTables` (the tables the change triggers named, `schema.table`; a name without a schema matches
    /// any), a scope built from its current version reads only the template tables whose rows query reads one of
    /// them, as PostgreSQL's plan of that query says (`EXPLAIN`: views, joins, `filter:` subqueries and `parent:`
    /// links included). The others keep their rows from the current version. A query that cannot be explained, and
    /// a scoped template, read everything. Nil reads every table.
    ///
    /// Cancelling the calling task stops the publish between phases: before the export, after each table, and before
    /// the first file goes into the store. It then throws `CancellationError`, and the store is as it was (the
    /// files in `tmp/` are removed). Once storing has begun, the publish finishes: that takes seconds, and the store
    /// never holds half a version.
    public func publish(changedTables: Set<String>? = nil) async throws -> PublishResult {
        let cancelled = Locked(false)
        let job = self
        return try await withTaskCancellationHandler {
            try await ThreadJob.run(name: "ferry-publish") {
                try job.publishBlocking(changedTables: changedTables, isCancelled: { cancelled.current })
            }
        } onCancel: {
            cancelled.withLock { $0 = true }
        }
    }

    /// Publishes once on the calling thread.
    /// `isCancelled` is asked between phases, as in ``publish(changedTables:)``.
    public func publishBlocking(
        changedTables: Set<String>? = nil, isCancelled: @escaping @Sendable () -> Bool = { false }
    ) throws -> PublishResult {
        let started = ContinuousClock.now
        guard configuration.keep >= 1 else {
            throw FerryError(
                .badInput, "keep must be at least 1 (it is \(configuration.keep)): the current version is always kept",
                key: "keep")
        }
        let templates = try configuration.templatePaths.map { try Template.load(path: $0) }
        let template = templates[0]
        let dataset = template.dataset
        let store = FileSnapshotStore(root: configuration.store)
        if try templates.count > 1 || !store.lines(of: dataset).isEmpty {
            return try publishLines(
                templates, store: store, started: started, changed: changedTables, isCancelled: isCancelled)
        }
        let lock = try lockDataset(dataset, in: store)
        defer { lock.unlock() }

        let (removed, previous) = try store.cleanLeftoversReading(dataset: dataset)
        if removed > 0 {
            logger.info(
                "removed leftovers of an interrupted publish",
                metadata: ["dataset": "\(dataset)", "files": "\(removed)"])
        }
        if isCancelled() { throw CancellationError() }
        return try publish(
            template: template, store: store, started: started, changed: changedTables, isCancelled: isCancelled,
            previous: .some(previous))
    }

    /// Takes the dataset's publisher lock, failing at once with a message saying what to do when another publish
    /// holds it (unless ``Configuration/waitForLock``).
    /// With ``Configuration/waitForLock``, a lock held by another publish is logged, then waited for.
    func lockDataset(_ dataset: String, in store: FileSnapshotStore) throws -> FileLock {
        do {
            return try store.lock(dataset: dataset, wait: false)
        } catch let error as FerryError where error.code == .store {
            if configuration.waitForLock {
                logger.notice(
                    "another ferry process is publishing this dataset; waiting for it to finish",
                    metadata: ["dataset": "\(dataset)"])
                waitingForLock?()
                return try store.lock(dataset: dataset, wait: true)
            }
            throw FerryError(
                .store,
                "dataset '\(dataset)' is being published by another ferry process (lock held); wait for it to finish or stop it, then retry",
                path: error.path)
        }
    }
}
