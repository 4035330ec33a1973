import FerryCore
import FerryMerge
import Foundation
import Logging
import ServiceLifecycle

/// Keeps the merge engine's tables bounded, for every dataset that accepts changes:
/// - **Tombstones** are kept while a device may hold a snapshot older than the delete: when the catalog sees a new
///   manifest (a publish in this process, in `ferry publish` or in `ferry schedule`), the tombstones older than
///   the oldest retained snapshot of any scope are deleted.
/// - **Stored answers** in `ferry_changes` are deleted once older than
///   ``ServerConfiguration/DatabaseSettings/changeRetention``
///   (a device resending an older change is answered afresh), checked at start and every
///   ``ServerConfiguration/DatabaseSettings/retentionSweepInterval``.
///
/// Both are logged and counted in `/metrics` (`ferry_retention_pruned_total{dataset,kind}`). A failed prune is
/// logged and tried again at the next check; it never stops the server.
final class RetentionService: Service {
    let catalog: SnapshotCatalog
    let mergers: [String: ChangeMerger]
    let changeRetention: Duration
    let sweepInterval: Duration
    let checkInterval: Duration
    let metrics: ServerMetrics?
    let logger: Logger
    /// The cutoff last pruned to, per dataset.
    private let pruned = Locked([String: String]())

    init(
        catalog: SnapshotCatalog, mergers: [String: ChangeMerger], changeRetention: Duration, sweepInterval: Duration,
        checkInterval: Duration,
        metrics: ServerMetrics?, logger: Logger
    ) {
        self.catalog = catalog
        self.mergers = mergers
        self.changeRetention = changeRetention
        self.sweepInterval = sweepInterval
        self.checkInterval = checkInterval
        self.metrics = metrics
        self.logger = logger
    }

    func run() async throws {
        let clock = ContinuousClock()
        var nextSweep = clock.now
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            await pruneTombstones()
            if clock.now >= nextSweep {
                await pruneChanges(now: Date())
                nextSweep = clock.now.advanced(by: sweepInterval)
            }
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: self.checkInterval) }
            } catch {
                break
            }
        }
    }

    /// Deletes each dataset's tombstones older than its oldest retained snapshot, once per new cutoff.
    func pruneTombstones() async {
        for (dataset, merger) in mergers.sorted(by: { $0.key < $1.key }) {
            guard let cutoffText = catalog.dataset(dataset)?.oldestRetainedCreatedAt,
                pruned.withLock({ $0[dataset] }) != cutoffText
            else { continue }
            guard let cutoff = Timestamp.parse(cutoffText) else {
                logger.warning(
                    "the oldest retained snapshot has an unreadable createdAt; tombstones kept",
                    metadata: ["dataset": "\(dataset)", "createdAt": "\(cutoffText)"])
                pruned.withLock { $0[dataset] = cutoffText }
                continue
            }
            let done = await prune(
                "tombstones", of: dataset, before: cutoffText,
                done: "pruned tombstones older than the oldest retained snapshot",
                failed: "pruning tombstones failed; retrying at the next check"
            ) { try await merger.pruneTombstones(before: cutoff) }
            if done { pruned.withLock { $0[dataset] = cutoffText } }
        }
    }

    /// Deletes stored answers older than the retention window, and never one younger than the dataset's oldest
    /// retained (or history) version: a device that comes back on that version may resend what it pushed.
    func pruneChanges(now: Date) async {
        let window = now.addingTimeInterval(-Double(changeRetention.components.seconds))
        for (dataset, merger) in mergers.sorted(by: { $0.key < $1.key }) {
            let oldest = catalog.dataset(dataset)?.oldestRetainedCreatedAt.flatMap(Timestamp.parse)
            let cutoff = min(window, oldest ?? window)
            await prune(
                "changes", of: dataset, before: Timestamp.format(cutoff), done: "pruned stored change answers",
                failed: "pruning stored change answers failed; retrying at the next sweep"
            ) { try await merger.pruneProcessedChanges(before: cutoff) }
        }
    }

    /// Runs one prune of `kind` (`tombstones` or `changes`) of `dataset`, then counts and logs the rows it removed
    /// (`done`); a failure is logged (`failed`) and left to the next check. Whether it succeeded.
    @discardableResult
    private func prune(
        _ kind: String, of dataset: String, before cutoff: String, done: String, failed: String,
        _ body: () async throws -> Int
    ) async -> Bool {
        do {
            let count = try await body()
            metrics?.recordPruned(dataset: dataset, kind: kind, count: count)
            logger.info(
                "\(done)", metadata: ["dataset": "\(dataset)", "before": "\(cutoff)", "removed": "\(count)"])
            return true
        } catch {
            logger.warning("\(failed)", metadata: ["dataset": "\(dataset)", "error": "\(error)"])
            return false
        }
    }
}
