import FerryCore
import FerryPostgres
import FerryStore
import Foundation
import Logging

/// Checkpoints and steps (docs/delta.md): a scope's new version is stored as the patch from its previous version
/// (its **step**) plus its record, and its file is built in place of the previous one's in the publisher's work
/// directory by ``Materializer``, exactly as a server will build it (``IncrementalBuild``). Full files go into the store only at a checkpoint: the first version, a schema
/// version bump, when the steps since the last checkpoint pass ``Configuration/checkpointAt`` of its gzip copy, or
/// when it is ``Configuration/checkpointEvery`` old.
extension Publisher {
    /// Without a patch horizon, devices this many versions behind or fewer get a stored patch to the new version; a
    /// longer absence takes the full download. With one, the only stored patch is the step from the previous version:
    /// a device further behind asks the server for its catch-up patch (docs/delta.md, "Catching up"), so a version
    /// costs the store its step and nothing more.
    static let patchBases = 4

    /// The most versions stored as steps after a checkpoint. The history tiers never thin them (a server builds a
    /// whole file of any of them from the checkpoint by the steps exactly as published: a merged step would build
    /// other bytes), so this bounds the manifest: about 128 records of ~600 bytes beside the thinned history.
    public static let stepsPerCheckpoint = 128

    /// The builder of dataset `dataset`'s files in the publisher's work directory.
    func workBuilder(store: FileSnapshotStore, dataset: String) -> VersionBuilder {
        let root = configuration.workDirectory ?? store.root.appendingPathComponent(".ferry-work", isDirectory: true)
        return VersionBuilder(store: store, cache: root.appendingPathComponent(dataset, isDirectory: true))
    }

    /// Why the next version of `before` must be a checkpoint whatever its size, or nil when it may be a step.
    func checkpointReason(before: ScopeEntry?, schemaVersion: Int, now: Date) -> String? {
        guard configuration.checkpointAt > 0, configuration.patches else { return "steps are off" }
        // `--full` builds a compact file from scratch: stored in full, so the next steps start from it.
        guard configuration.incremental else { return "--full" }
        guard let before else { return "the first version" }
        guard before.current.schemaVersion == schemaVersion else { return "a schema version bump" }
        guard let last = before.retained.last(where: \.isCheckpoint) else { return "no checkpoint is retained" }
        let since = before.retained.count - 1 - (before.retained.lastIndex(where: \.isCheckpoint) ?? 0)
        if since >= Self.stepsPerCheckpoint { return "\(since) versions since the last checkpoint" }
        if let millis = Timestamp.parseMillis(last.createdAt),
            now.timeIntervalSince1970 - Double(millis) / 1000 >= configuration.checkpointEvery.inSeconds
        {
            return "the last checkpoint is older than \(configuration.checkpointEvery.shortDescription)"
        }
        return nil
    }

    /// ``storeStep(_:after:in:template:version:createdAt:store:)``, with any failure logged and answered nil: the
    /// caller then stores full files (a checkpoint), which needs nothing the failure could have damaged.
    func storeStepOrCheckpoint(
        _ export: ScopeExport, after before: ScopeEntry, in comparable: StoredManifest, template: Template,
        version: Int, createdAt: String, store: FileSnapshotStore
    ) -> (record: VersionRecord, changeset: Changeset)? {
        do {
            return try storeStep(
                export, after: before, in: comparable, template: template, version: version, createdAt: createdAt,
                store: store)
        } catch {
            var metadata: Logger.Metadata = ["dataset": "\(template.dataset)", "error": "\(error)"]
            if let scope = export.scope { metadata["scope"] = "\(scope)" }
            logger.warning("cannot store this version as a step; cutting a checkpoint", metadata: metadata)
            return nil
        }
    }

    /// Stores `export` as a step from `before`'s current version, and returns its record; nil when the steps since
    /// the last checkpoint would pass ``Configuration/checkpointAt`` of its gzip copy, when the file has too many free
    /// pages, or when it was built from scratch (the caller then cuts a checkpoint). The export's file is the new
    /// version's, built in place from the current one's by its own step (``IncrementalBuild``): it becomes the
    /// working copy in the work directory, with its row index, and the next step builds on it.
    func storeStep(
        _ export: ScopeExport, after before: ScopeEntry, in comparable: StoredManifest, template: Template,
        version: Int, createdAt: String, store: FileSnapshotStore
    ) throws -> (record: VersionRecord, changeset: Changeset)? {
        // A file built from scratch has its own page layout, and a row index of its own rowids: stored whole, it is
        // the next incremental build's base.
        guard export.result.materialized, let changeset = export.result.changeset else { return nil }
        let dataset = template.dataset
        let previous = before.current
        guard let last = before.retained.last(where: \.isCheckpoint) else { return nil }
        let since = before.retained.compactMap(\.step).filter { $0.to > last.version }.reduce(Int64(0)) { $0 + $1.size }
        // Steps free pages and reuse them; once a quarter of the file is free, a checkpoint stores the file, and the
        // next publish builds a compact one from scratch (its row index is gone).
        guard export.result.freeShare ?? 1 < 0.25,
            let step = try store.storePatch(
                dataset: dataset, changeset: changeset, from: previous.version, base: previous.sha256, to: version,
                limit: .max),
            Double(since + step.size) <= configuration.checkpointAt * Double(last.gzipSize)
        else { return nil }
        let sha256 = try export.result.sha256 ?? FileDigest.sha256Hex(of: export.file)
        let published = PublishedVersion(
            version: version, sha256: sha256, size: try FileSnapshotStore.fileSize(export.file), gzipSize: 0,
            createdAt: createdAt, schemaVersion: template.schemaVersion, tables: export.result.tables,
            contentDigest: export.result.contentDigest)
        let builder = workBuilder(store: store, dataset: dataset)
        try DurableFile.makeDirectory(builder.cache)
        if let rowIndex = export.result.rowIndex {
            try DurableFile.rename(rowIndex, to: Self.workingRowIndex(of: sha256, in: builder))
        }
        try DurableFile.rename(export.file, to: builder.builtURL(sha256: sha256))
        return (VersionRecord(published: published, dataDigest: export.result.dataDigest, step: step), changeset)
    }

    /// The row index of the working copy `<sha256>.sqlite` in the work directory: `<sha256>.sqlite.rows`, named
    /// apart from the `<sha256>.rows` earlier releases kept there for another file.
    static func workingRowIndex(of sha256: String, in builder: VersionBuilder) -> URL {
        builder.cache.appendingPathComponent("\(sha256).sqlite.rows")
    }

    /// The share of `file`'s pages on SQLite's free list.
    static func freeShare(of file: URL) throws -> Double {
        let db = try SQLiteConnection(path: file.path, mode: .readOnly)
        let pages = try db.scalar("PRAGMA page_count")?.integer ?? 0
        let free = try db.scalar("PRAGMA freelist_count")?.integer ?? 0
        return pages > 0 ? Double(free) / Double(pages) : 0
    }

    /// What a scope's next version can be built from: its current version's file and row index, in the store for a
    /// checkpoint, in the work directory for a step; nil when either is missing or no content digest is recorded.
    func incrementalBase(_ current: VersionRecord, in manifest: StoredManifest, store: FileSnapshotStore)
        -> IncrementalBase?
    {
        let snapshot: URL
        let rowIndex: URL
        if current.isCheckpoint {
            snapshot = store.files(of: current, in: manifest).snapshot
            rowIndex = store.rowIndexURL(dataset: manifest.dataset, sha256: current.sha256)
        } else {
            let builder = workBuilder(store: store, dataset: manifest.dataset)
            snapshot = builder.builtURL(sha256: current.sha256)
            rowIndex = Self.workingRowIndex(of: current.sha256, in: builder)
        }
        guard FileManager.default.fileExists(atPath: rowIndex.path),
            FileManager.default.fileExists(atPath: snapshot.path), let hex = current.published.contentDigest,
            let digest = ContentDigest(hex: hex)
        else { return nil }
        return IncrementalBase(
            version: current.version, snapshot: snapshot, rowIndex: rowIndex, contentDigest: digest,
            inPlace: !current.isCheckpoint)
    }

    /// The versions the new version `record` gets patches from. Without a patch horizon: up to ``patchBases`` of
    /// those the scope retains after this publish. With one: the previous version (the step) and, for a version
    /// stored as a step, the newest checkpoint, whose patch lets a new device start from that checkpoint's file
    /// instead of asking a server to build the current one (docs/delta.md, "What a server does per version").
    func patchBases(before: ScopeEntry, adding record: VersionRecord, now: Date) -> [VersionRecord] {
        let retained = scopeEntry(scope: before.scope, before: before, adding: record, now: now).retained.dropLast()
        guard configuration.patchHorizon > .zero else { return Array(retained.suffix(Self.patchBases)) }
        guard let previous = retained.last else { return [] }
        guard !record.isCheckpoint, let checkpoint = retained.last(where: \.isCheckpoint),
            checkpoint.version != previous.version
        else { return [previous] }
        return [checkpoint, previous]
    }

    /// The scope's entry after this publish (``scopeEntry(scope:before:adding:now:)``), its chain thinned.
    func nextEntry(
        _ scope: String?, before: ScopeEntry?, adding record: VersionRecord?, dataset: String,
        store: FileSnapshotStore, now: Date
    ) -> ScopeEntry {
        compacted(
            scopeEntry(scope: scope, before: before, adding: record, now: now), dataset: dataset, store: store,
            now: now)
    }

    /// `entry` with its chain thinned by ``Configuration/tiers`` (``FileSnapshotStore/compact(_:dataset:tiers:now:)``).
    /// A failure is logged and the entry kept as it is: the next publish tries again, and nothing was lost.
    func compacted(_ entry: ScopeEntry, dataset: String, store: FileSnapshotStore, now: Date) -> ScopeEntry {
        guard configuration.patchHorizon > .zero else { return entry }
        do {
            return try store.compact(entry, dataset: dataset, tiers: configuration.tiers, now: now)
        } catch {
            var metadata: Logger.Metadata = ["dataset": "\(dataset)", "error": "\(error)"]
            if let scope = entry.scope { metadata["scope"] = "\(scope)" }
            logger.warning("cannot thin the history this time; keeping every version", metadata: metadata)
            return entry
        }
    }

    /// The scope's entry after this publish: `before`'s versions plus `record` (when the scope has a new version),
    /// retained from the newest ``Configuration/keep`` checkpoints on; the older versions published within
    /// ``Configuration/patchHorizon`` stay as history, with their steps only.
    func scopeEntry(scope: String?, before: ScopeEntry?, adding record: VersionRecord?, now: Date) -> ScopeEntry {
        let chain = (before?.chain ?? []) + (record.map { [$0] } ?? [])
        var start = 0
        var seen = 0
        for index in chain.indices.reversed() where chain[index].isCheckpoint {
            seen += 1
            start = index
            if seen == configuration.keep { break }
        }
        let horizon = configuration.patchHorizon.inSeconds
        var history: [VersionRecord] = []
        if horizon > 0 {
            let cutoff = Timestamp.format(now.addingTimeInterval(-horizon))
            // Each version kept is reached from the one before it by that one's successor's step.
            var index = start
            while index > 0, chain[index].step != nil, chain[index - 1].createdAt >= cutoff {
                var kept = chain[index - 1]
                kept.checkpoint = false
                kept.published.patches = nil
                history.insert(kept, at: 0)
                index -= 1
            }
        }
        var entry = ScopeEntry(scope: scope, retained: Array(chain[start...]))
        // The oldest kept version's step leads from a version that is gone.
        if history.isEmpty {
            entry.retained[0].step = nil
        } else {
            history[0].step = nil
            entry.history = history
        }
        return entry
    }
}
