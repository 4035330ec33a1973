import FerryCore
import FerryPostgres
import FerryStore
import Foundation
import Logging

/// The one publish path. An unscoped dataset is a single implicit scope (nil); a template with `scope:` has one
/// scope per value of its values query, all exported from one PostgreSQL snapshot.
///
/// The first session begins a `REPEATABLE READ READ ONLY` transaction, resolves the template and reads the scope
/// values; with several scopes it exports its snapshot id (`pg_export_snapshot()`) and up to
/// ``Publisher/Configuration/parallelism`` sessions import it (`SET TRANSACTION SNAPSHOT`) and export scopes side by
/// side, so every scope sees exactly the same data. Then, per scope: data equal to its current version's → it keeps
/// that version; otherwise it gets this publish's version number, and its file is stored under its checksum (scopes
/// with identical data share one file). The new ``StoredManifest`` replaces `manifest.json` atomically, then
/// objects no retained version names are deleted, including those of scope values that disappeared.
extension Publisher {
    struct ScopeExport {
        let scope: String?
        let file: URL
        var result: ExportResult
    }

    /// The scopes' entries of the new manifest, and which scopes kept their current version.
    struct StoredScopes {
        var entries: [ScopeEntry] = []
        var unchangedScopes: Set<String?> = []
    }

    func publish(
        template: Template, store: FileSnapshotStore, started: ContinuousClock.Instant, changed: Set<String>? = nil,
        isCancelled: @escaping @Sendable () -> Bool = { false }, snapshotID: String? = nil, version: Int? = nil,
        previous known: StoredManifest?? = nil
    ) throws -> PublishResult {
        let dataset = template.dataset
        // The manifest as the caller just read it (`.some(nil)`: never published), else read here
        let previous = try known ?? store.storedManifest(for: dataset)
        let version = version ?? (previous?.lastVersion ?? 0) + 1  // store.nextVersion without reading it again
        let tmp = store.temporaryDirectory(dataset: dataset)
        try DurableFile.makeDirectory(tmp)
        let createdAt = Timestamp.format(configuration.clock())

        let main = try ExportSession(
            template: template, databaseURL: configuration.databaseURL, joining: snapshotID)
        let scopes = try streams(of: template, pg: main.pg)
        if scopes.isEmpty {
            logger.warning("the scope values are empty: no scope gets a snapshot", metadata: ["dataset": "\(dataset)"])
        }
        let gzipLevel = min(3, max(0, configuration.gzipLevel))
        var keep: Set<String> = []
        if let changed, !template.hasStreams {
            let read = ChangedTables.tablesToRead(
                relations: ChangedTables.relations(of: main.plans, pg: main.pg), changed: changed)
            keep = Set(main.plans.map(\.name)).subtracting(read)
        }
        // A switch between scoped and unscoped starts every scope afresh.
        let comparable =
            previous?.scoped == template.hasStreams && previous?.partitioning == template.partitionLayout
            ? previous : nil
        var unchangedDigests: [String?: String] = [:]
        var bases: [String?: IncrementalBase] = [:]
        var stepCandidates: Set<String?> = []
        for entry in comparable?.scopes ?? [] {
            unchangedDigests[entry.scope] = entry.current.dataDigest
            if configuration.incremental, let comparable {
                bases[entry.scope] = incrementalBase(entry.current, in: comparable, store: store)
            }
            if checkpointReason(before: entry, schemaVersion: template.schemaVersion, now: configuration.clock()) == nil
            {
                stepCandidates.insert(entry.scope)
            }
        }
        let exports: [ScopeExport]
        do {
            exports = try exportAll(
                scopes: scopes, main: main, template: template, tmp: tmp, version: version, createdAt: createdAt,
                unchangedDigests: unchangedDigests, bases: bases, gzipLevel: gzipLevel, keep: keep,
                stepCandidates: stepCandidates, isCancelled: isCancelled)
            // The last moment to stop: from here on, files go into the store.
            if isCancelled() { throw CancellationError() }
        } catch {
            try store.clearTemporaryDirectory(dataset: dataset)
            throw error
        }

        var phases = PublishPhases()
        for export in exports { phases.add(export.result.phases) }
        let kept = Set(exports.flatMap(\.result.keptTables)).sorted()
        if !kept.isEmpty {
            logger.info(
                "tables kept from the current version without reading them",
                metadata: ["dataset": "\(dataset)", "tables": "\(kept)"])
        }
        let stored = try storeExports(
            exports, after: comparable, template: template, version: version, createdAt: createdAt,
            gzipLevel: gzipLevel, store: store, phases: &phases)
        var result = try commit(
            stored, template: template, scopes: scopes, previous: previous, comparable: comparable,
            version: version, createdAt: createdAt, store: store, started: started, phases: phases)
        var incremental = IncrementalCounts()
        for export in exports { if let counts = export.result.incremental { incremental.add(counts) } }
        result.incremental = exports.contains { $0.result.incremental != nil } ? incremental : nil
        result.keptTables = kept
        return result
    }

    /// Moves each scope's export into the store (or drops it: when its data equals its current version's, or
    /// another scope of this publish already stored the same data) and builds its entry of the new manifest, with
    /// patches from its older versions.
    private func storeExports(
        _ exports: [ScopeExport], after comparable: StoredManifest?, template: Template, version: Int,
        createdAt: String, gzipLevel: Int, store: FileSnapshotStore, phases: inout PublishPhases
    ) throws -> StoredScopes {
        let dataset = template.dataset
        let now = configuration.clock()
        var stored = StoredScopes()
        var storedByDigest: [String: FileSnapshotStore.StoredObject] = [:]
        for export in exports {
            let before = comparable?.entry(for: export.scope)
            if let before, before.current.dataDigest == export.result.dataDigest {
                try discard(export)
                stored.entries.append(
                    nextEntry(export.scope, before: before, adding: nil, dataset: dataset, store: store, now: now))
                stored.unchangedScopes.insert(export.scope)
                continue
            }
            if let before, let comparable,
                checkpointReason(before: before, schemaVersion: template.schemaVersion, now: now) == nil,
                let stepped = phases.time(
                    .patches,
                    {
                        storeStepOrCheckpoint(
                            export, after: before, in: comparable, template: template, version: version,
                            createdAt: createdAt, store: store)
                    })
            {
                var record = stepped.record
                record.published.patches = phases.time(.patches) {
                    patches(
                        to: record, tables: export.result.tables.keys.sorted() + ["ferry_tables"], after: before,
                        from: patchBases(before: before, adding: record, now: now), in: comparable, store: store,
                        diff: stepped.changeset, step: record.step)
                }
                stored.entries.append(
                    nextEntry(export.scope, before: before, adding: record, dataset: dataset, store: store, now: now))
                continue
            }
            let object: FileSnapshotStore.StoredObject
            if let shared = storedByDigest[export.result.dataDigest] {
                try discard(export)
                object = shared
            } else {
                object = try phases.time(.store) {
                    let prepared =
                        try export.result.prepared
                        ?? FileSnapshotStore.PreparedObject(file: export.file, encoding: .igzip(level: gzipLevel))
                    let object = try store.storeObject(dataset: dataset, prepared: prepared)
                    if let rowIndex = export.result.rowIndex {
                        try DurableFile.rename(rowIndex, to: store.rowIndexURL(dataset: dataset, sha256: object.sha256))
                    }
                    return object
                }
                storedByDigest[export.result.dataDigest] = object
            }
            var record = VersionRecord(
                published: PublishedVersion(
                    version: version, sha256: object.sha256, size: object.size, gzipSize: object.gzipSize,
                    createdAt: createdAt,
                    schemaVersion: template.schemaVersion, tables: export.result.tables,
                    contentDigest: export.result.contentDigest),
                dataDigest: export.result.dataDigest, checkpoint: true)
            if configuration.patches, let before, let comparable, before.current.schemaVersion == template.schemaVersion
            {
                record.published.patches = phases.time(.patches) {
                    patches(
                        to: record, tables: export.result.tables.keys.sorted() + ["ferry_tables"], after: before,
                        from: patchBases(before: before, adding: record, now: now), in: comparable, store: store,
                        diff: export.result.changeset)
                }
                // The patch from the previous version is this checkpoint's step: the history goes on through it.
                record.step = record.published.patch(from: before.current.version)
            }
            stored.entries.append(
                nextEntry(export.scope, before: before, adding: record, dataset: dataset, store: store, now: now))
        }
        return stored
    }

    /// Removes an export that goes into no store: its file, its row index and a prepared gzip copy.
    private func discard(_ export: ScopeExport) throws {
        try export.result.prepared?.discard()
        try DurableFile.remove(export.file)
        if let rowIndex = export.result.rowIndex { try DurableFile.remove(rowIndex) }
    }

    /// Writes the new manifest of `stored`'s entries, unless it equals `previous` (then nothing is written and the
    /// result is `unchanged`).
    private func commit(
        _ stored: StoredScopes, template: Template, scopes: [String?], previous: StoredManifest?,
        comparable: StoredManifest?, version: Int, createdAt: String, store: FileSnapshotStore,
        started: ContinuousClock.Instant, phases: PublishPhases
    ) throws -> PublishResult {
        let dataset = template.dataset
        var phases = phases
        let newVersion = stored.entries.count > stored.unchangedScopes.count
        var manifest = StoredManifest(
            dataset: dataset, scoped: template.hasStreams, schemaVersion: template.schemaVersion,
            lastVersion: newVersion ? version : (previous?.lastVersion ?? 0),
            createdAt: newVersion ? createdAt : (previous?.createdAt ?? createdAt), scopes: stored.entries)
        let horizon = Int(configuration.patchHorizon.inSeconds)
        manifest.patchHorizon = horizon > 0 ? horizon : nil
        if let layout = template.partitionLayout {
            manifest.partitioning = layout
            manifest.retiredPartitions = Self.retiredPartitions(
                before: comparable, now: Set(stored.entries.compactMap(\.scope)))
        }
        let seconds = { (ContinuousClock.now - started).inSeconds }
        let sameScopes = comparable.map { Set($0.scopes.map(\.scope)) == Set(scopes) } ?? false
        if let previous, previous == manifest {
            logger.info(
                "data unchanged; no new version",
                metadata: ["dataset": "\(dataset)", "version": "\(previous.lastVersion)"])
            return PublishResult(
                stored: previous, unchangedScopes: stored.unchangedScopes, unchanged: true, seconds: seconds(),
                phases: phases)
        }
        try phases.time(.manifest) {
            if configuration.storeIsCache {
                try manifest.validate()
                try DurableFile.write(try manifest.jsonData(), to: store.manifestURL(dataset: dataset))
            } else {
                try store.commit(manifest)
            }
            // The work directory keeps each scope's current files only: the next publish builds on them.
            workBuilder(store: store, dataset: dataset).prune(keeping: Set(manifest.scopes.map(\.current.sha256)))
        }
        let dropped = (previous?.scopes.compactMap(\.scope) ?? []).filter { !scopes.contains($0) }
        logger.info(
            newVersion ? "published" : "retention changed; no new version",
            metadata: [
                "dataset": "\(dataset)", "version": "\(manifest.lastVersion)", "scopes": "\(stored.entries.count)",
                "files": "\(Set(stored.entries.map(\.current.sha256)).count)", "dropped": "\(dropped.count)",
                "seconds": "\(seconds())",
            ])
        return PublishResult(
            stored: manifest, unchangedScopes: stored.unchangedScopes, unchanged: !newVersion && sameScopes,
            seconds: seconds(), phases: phases)
    }

    /// The partitions retired after this publish: those retired before and those `before` served that are not in
    /// `now`, minus any that came back; nil when none. At most 10,000 are remembered (the rest answer 404).
    static func retiredPartitions(before: StoredManifest?, now: Set<String>) -> [String]? {
        guard let before else { return nil }
        let served = Set(before.scopes.compactMap(\.scope)).subtracting([PartitionLayout.sharedStream])
        let retired = Set(before.retiredPartitions ?? []).union(served).subtracting(now)
        return retired.isEmpty ? nil : Array(retired.sorted().suffix(10_000))
    }

    /// Patches from each older retained version of a scope to its new version `record`: the diff from the previous
    /// current version (recorded by an incremental build as it wrote the changes, else one SQLite session diff
    /// between the two files), combined (sqlite3changegroup) with each stored patch that led to the previous version,
    /// so a device several versions behind downloads one patch, not a chain. A patch not smaller than the gzip copy
    /// is not stored. Patches only save bytes: a failure is logged and the scope simply has none (its devices take
    /// the full download).
    func patches(
        to record: VersionRecord, tables: [String], after before: ScopeEntry, from bases: [VersionRecord],
        in previous: StoredManifest,
        store: FileSnapshotStore, diff recorded: Changeset? = nil, step: PatchRef? = nil
    ) -> [PatchRef]? {
        let dataset = previous.dataset
        let previousCurrent = before.current
        do {
            let diff =
                try recorded
                ?? Changeset.diff(
                    from: workBuilder(store: store, dataset: dataset).file(
                        of: previousCurrent, in: before, manifest: previous),
                    to: record.isCheckpoint
                        ? store.objectURL(dataset: dataset, sha256: record.sha256)
                        : workBuilder(store: store, dataset: dataset).builtURL(sha256: record.sha256),
                    tables: tables)
            var refs: [PatchRef] = []
            for base in bases {
                let from = base.version
                if from == previousCurrent.version, let step {
                    // The step is the patch from the previous version: the same object serves devices.
                    refs.append(step)
                    continue
                }
                do {
                    let changeset: Changeset
                    if from == previousCurrent.version {
                        changeset = diff
                    } else if let hop = previousCurrent.published.patch(from: from) {
                        changeset = try Changeset.combine([store.loadPatch(dataset: dataset, hop), diff])
                    } else if let steps = Self.steps(after: from, in: before) {
                        // No stored patch leads from `from` to the previous version: its steps do.
                        changeset = try Changeset.combine(
                            steps.map { try store.loadPatch(dataset: dataset, $0) } + [diff])
                    } else {
                        continue
                    }
                    if let ref = try store.storePatch(
                        dataset: dataset, changeset: changeset, from: from, base: base.sha256, to: record.version,
                        limit: record.gzipSize > 0 ? record.gzipSize : record.size)
                    {
                        refs.append(ref)
                    }
                } catch {
                    // One base's patch only saves bytes: the others, the step above all, are still stored.
                    logger.warning(
                        "no patch from this version; its devices take another way",
                        metadata: [
                            "dataset": "\(dataset)", "from": "\(from)", "version": "\(record.version)",
                            "error": "\(error)",
                        ])
                }
            }
            return refs.isEmpty ? nil : refs
        } catch {
            logger.warning(
                "no patches for this version; devices take the full download",
                metadata: ["dataset": "\(dataset)", "version": "\(record.version)", "error": "\(error)"])
            return nil
        }
    }

    /// The steps that lead from version `from` to `entry`'s current version, oldest first; nil where one is missing.
    static func steps(after from: Int, in entry: ScopeEntry) -> [PatchRef]? {
        let chain = entry.chain
        guard let start = chain.firstIndex(where: { $0.version == from }) else { return nil }
        let steps = chain[(start + 1)...].map(\.step)
        guard steps.allSatisfy({ $0 != nil }) else { return nil }
        return steps.compactMap { $0 }
    }

    /// The streams of `template`: nil for an unscoped dataset's one; else its scope values or, partitioned, the shared
    /// stream and the partition keys (a key that cannot name a partition is skipped with an error in the log).
    func streams(of template: Template, pg: PostgresConnection) throws -> [String?] {
        guard template.hasStreams else { return [nil] }
        let values = try TemplateValidator.scopeValues(for: template, pg: pg)
        guard template.partition != nil else { return values }
        return values.enumerated().compactMap { index, key in
            if index == 0 || PartitionLayout.isValidKey(key) { return key }
            logger.error(
                "a partition key is empty, longer than 200 bytes or holds a control character: its partition is skipped; fix the key or `partition.values`",
                metadata: ["dataset": "\(template.dataset)", "key": "\(key.prefix(80).debugDescription)"])
            return nil
        }
    }

    /// Exports every scope into `tmp`, `configuration.parallelism` at a time; the first error stops the rest.
    private func exportAll(
        scopes: [String?], main: ExportSession, template: Template, tmp: URL, version: Int, createdAt: String,
        unchangedDigests: [String?: String], bases: [String?: IncrementalBase], gzipLevel: Int, keep: Set<String>,
        stepCandidates: Set<String?>, isCancelled: @escaping @Sendable () -> Bool
    ) throws -> [ScopeExport] {
        guard !scopes.isEmpty else { return [] }
        let probeStarted = ContinuousClock.now
        let probed = try probePartitions(
            template: template, main: main, keys: scopes.compactMap { $0 }.filter { unchangedDigests[$0] != nil })
        let probeSeconds = probed.isEmpty ? nil : (ContinuousClock.now - probeStarted).inSeconds
        let workers = max(1, min(configuration.parallelism, scopes.count))
        let snapshotID = workers > 1 ? try main.exportSnapshot() : ""
        let state = Locked(ExportState(results: Array(repeating: nil, count: scopes.count)))
        let (databaseURL, progress, afterTable, logger) = (
            configuration.databaseURL, configuration.progress, afterTable, self.logger
        )
        let plans = main.plans
        // Each worker owns one session; worker 0 uses the one that exported the snapshot, which stays open (and so
        // keeps the snapshot importable) until every worker is done.
        DispatchQueue.concurrentPerform(iterations: workers) { worker in
            do {
                let session =
                    worker == 0 ? main : try ExportSession(joining: snapshotID, databaseURL: databaseURL, plans: plans)
                let exporter = SnapshotExporter(template: template, logger: logger)
                exporter.progress = progress
                exporter.afterTable = { table in
                    try afterTable?(table)
                    if isCancelled() { throw CancellationError() }
                }
                while let index = state.withLock({ $0.next(limit: scopes.count) }) {
                    let file = tmp.appendingPathComponent("\(version)-\(index).sqlite")
                    // A partition whose rows are its current version's (PartitionProbe) takes no file.
                    if let key = scopes[index], let digest = probed[key], digest == unchangedDigests[key] ?? nil {
                        let result = ExportResult(tables: [:], dataDigest: digest, contentDigest: nil, prepared: nil)
                        state.withLock { $0.results[index] = ScopeExport(scope: key, file: file, result: result) }
                        continue
                    }
                    let result = try exporter.write(
                        plans: plans, from: session.pg, to: file, version: version, createdAt: createdAt,
                        scope: scopes[index],
                        unchangedDigest: unchangedDigests[scopes[index]],
                        // A version likely stored as a step gets no gzip copy now; a checkpoint makes one later.
                        gzipLevel: stepCandidates.contains(scopes[index]) ? nil : gzipLevel,
                        base: bases[scopes[index]], keep: keep)
                    state.withLock { $0.results[index] = ScopeExport(scope: scopes[index], file: file, result: result) }
                }
            } catch {
                state.withLock { $0.fail(error) }
            }
        }
        let final = state.withLock { $0 }
        if let error = final.error { throw error }
        var results = final.results.map { $0! }
        // The probe's time goes with the first export's phases (phases are summed over scopes).
        if let probeSeconds, !results.isEmpty { results[0].result.phases.add(.probe, probeSeconds) }
        return results
    }
}

/// The shared work list of a parallel export.
struct ExportState {
    var results: [Publisher.ScopeExport?]
    var nextIndex = 0
    var error: (any Error)?

    mutating func next(limit: Int) -> Int? {
        guard error == nil, nextIndex < limit else { return nil }
        defer { nextIndex += 1 }
        return nextIndex
    }

    mutating func fail(_ error: any Error) {
        if self.error == nil { self.error = error }
    }
}
