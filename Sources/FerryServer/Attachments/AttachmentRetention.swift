import FerryCore
import FerryStore
import Foundation
import Logging
import NIOPosix
import ServiceLifecycle

/// Keeps the attachments bounded, beside ``RetentionService`` (which keeps the merge engine's tables): at start and
/// every ``sweepInterval``, for each dataset of the store,
/// - deletes each attachment that no retained version of any scope names (``AttachmentNames``) and that was
///   uploaded longer than ``ServerConfiguration/attachmentGrace`` ago (the grace lets a device upload a photo, then
///   push the edit that names it, then see it published);
/// - deletes partial uploads older than ``ServerConfiguration/partialUploadExpiry``;
/// - sets `ferry_attachments_total{dataset}` and `ferry_attachment_bytes{dataset}` to what is left.
///
/// When the names of a dataset cannot be read (a damaged step, a checkpoint missing), nothing of it is deleted: the
/// sweep logs why and tries again next time. Every deletion is logged and counted
/// (`ferry_retention_pruned_total{dataset,kind="attachments"}`).
final class AttachmentRetention: Service {
    let catalog: SnapshotCatalog
    let store: any AttachmentStore
    let uploads: PartialUploads
    let grace: Duration
    let partialExpiry: Duration
    let sweepInterval: Duration
    let metrics: ServerMetrics?
    let logger: Logger
    /// What the channel sends itself; a deleted attachment is forgotten there.
    let files: AttachmentFiles?

    init(
        catalog: SnapshotCatalog, store: any AttachmentStore, uploads: PartialUploads, grace: Duration,
        partialExpiry: Duration, sweepInterval: Duration, metrics: ServerMetrics?, logger: Logger,
        files: AttachmentFiles? = nil
    ) {
        self.files = files
        self.catalog = catalog
        self.store = store
        self.uploads = uploads
        self.grace = grace
        self.partialExpiry = partialExpiry
        self.sweepInterval = sweepInterval
        self.metrics = metrics
        self.logger = logger
    }

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            await sweep(now: Date())
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: self.sweepInterval) }
            } catch {
                break
            }
        }
    }

    /// What one sweep deleted.
    struct Swept: Equatable {
        var attachments: [String] = []
        var partials = 0
    }

    /// One sweep as of `now` (tests call it directly).
    @discardableResult
    func sweep(now: Date) async -> Swept {
        var swept = Swept()
        let snapshots = catalog.store
        let datasets: [String]
        do {
            datasets = try await NIOThreadPool.singleton.runIfActive { try snapshots.datasets() }
        } catch {
            logger.warning("attachment retention cannot list the store", metadata: ["error": "\(error)"])
            return swept
        }
        // A dataset's schema lines share its attachments: they are kept while any line names them.
        let byBase = Dictionary(grouping: datasets) { DatasetName.base(of: $0) ?? $0 }
        for (base, lines) in byBase.sorted(by: { $0.key < $1.key }) {
            swept.attachments += await sweep(base, lines: lines, now: now)
        }
        let cutoff = now.addingTimeInterval(-partialExpiry.inSeconds)
        let uploads = self.uploads
        do {
            swept.partials = try await NIOThreadPool.singleton.runIfActive { try uploads.sweep(olderThan: cutoff) }
            if swept.partials > 0 {
                logger.info("deleted expired partial uploads", metadata: ["removed": "\(swept.partials)"])
            }
        } catch {
            logger.warning("deleting expired partial uploads failed", metadata: ["error": "\(error)"])
        }
        return swept
    }

    /// Counts what `base` holds again, after an upload landed during a count (a few tries; the next sweep counts
    /// anyway).
    private func recount(_ base: String) async throws {
        guard let metrics else { return }
        for _ in 0..<3 {
            let mark = metrics.attachmentsStoredMark(dataset: base)
            let held = try await store.list(dataset: base)
            if metrics.setAttachmentsHeld(
                dataset: base, count: held.count, bytes: held.reduce(0) { $0 + $1.size }, ifStoredSince: mark)
            {
                return
            }
        }
    }

    /// Sweeps the attachments of dataset `base`, whose manifests are `lines`; returns the names deleted.
    private func sweep(_ base: String, lines: [String], now: Date) async -> [String] {
        let snapshots = catalog.store
        do {
            let mark = metrics?.attachmentsStoredMark(dataset: base)
            let held = try await store.list(dataset: base)
            if held.isEmpty {
                if metrics?.setAttachmentsHeld(dataset: base, count: 0, bytes: 0, ifStoredSince: mark) == false {
                    try await recount(base)
                }
                return []
            }
            let named = try await NIOThreadPool.singleton.runIfActive {
                try lines.reduce(into: Set<String>()) {
                    $0.formUnion(try AttachmentNamesCache.allNames(dataset: $1, store: snapshots))
                }
            }
            let cutoff = now.addingTimeInterval(-grace.inSeconds)
            var deleted: [String] = []
            var kept = (count: 0, bytes: Int64(0))
            for info in held {
                if named.contains(info.sha256) || info.uploadedAt >= cutoff {
                    kept.count += 1
                    kept.bytes += info.size
                    continue
                }
                try await store.delete(dataset: base, sha256: info.sha256)
                files?.forget(sha256: info.sha256)
                deleted.append(info.sha256)
                logger.info(
                    "deleted an attachment no retained version names",
                    metadata: [
                        "dataset": "\(base)", "sha256": "\(info.sha256)",
                        "uploadedAt": "\(Timestamp.format(info.uploadedAt))",
                    ])
            }
            if metrics?.setAttachmentsHeld(dataset: base, count: kept.count, bytes: kept.bytes, ifStoredSince: mark)
                == false
            {
                try await recount(base)
            }
            if !deleted.isEmpty { metrics?.recordPruned(dataset: base, kind: "attachments", count: deleted.count) }
            return deleted
        } catch {
            logger.warning(
                "attachment retention skipped a dataset: its attachments or the names its versions hold cannot be read; nothing of it was deleted",
                metadata: ["dataset": "\(base)", "error": "\(error)"])
            return []
        }
    }
}
