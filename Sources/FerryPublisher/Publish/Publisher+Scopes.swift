import FerryCore
import FerryPostgres
import Foundation
import Logging

/// Publishing a template with `scope:`: one snapshot per scope value, all from one PostgreSQL snapshot.
///
/// The first session begins a `REPEATABLE READ READ ONLY` transaction, resolves the template, reads the scope
/// values and exports its snapshot id (`pg_export_snapshot()`); up to ``Publisher/Configuration/parallelism``
/// sessions import it (`SET TRANSACTION SNAPSHOT`) and export scopes side by side, so every scope sees exactly the
/// same data. Then, per scope: data equal to its current version's → it keeps that version; otherwise it gets
/// this publish's version number, and its file is stored under its checksum (scopes with identical data share one
/// file). The new ``ScopedManifest`` replaces `manifest.json` atomically, then files no retained version names
/// are deleted, including those of scope values that disappeared.
extension Publisher {
    struct ScopeExport {
        let scope: String
        let file: URL
        let result: ExportResult
    }

    func publishScoped(template: Template, store: FileSnapshotStore, started: ContinuousClock.Instant) throws -> PublishResult {
        let dataset = template.dataset
        var previous: ScopedManifest?
        if case .scoped(let manifest) = try store.storedManifest(for: dataset) { previous = manifest }
        let version = try store.nextVersion(dataset: dataset)
        let tmp = store.temporaryDirectory(dataset: dataset)
        try DurableFile.makeDirectory(tmp)
        let createdAt = Timestamp.format(Date())

        let main = try ExportSession(template: template, databaseURL: configuration.databaseURL)
        let scopes = try TemplateValidator.scopeValues(for: template, pg: main.pg)
        if scopes.isEmpty {
            logger.warning("the scope values are empty: no scope gets a snapshot", metadata: ["dataset": "\(dataset)"])
        }
        let exports: [ScopeExport]
        do {
            exports = try exportAll(scopes: scopes, main: main, template: template, tmp: tmp, version: version, createdAt: createdAt)
        } catch {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: tmp.path)) ?? [] {
                try? FileManager.default.removeItem(at: tmp.appendingPathComponent(name))
            }
            throw error
        }

        var entries: [ScopeEntry] = []
        var unchangedScopes: Set<String> = []
        var storedByDigest: [String: FileSnapshotStore.StoredObject] = [:]
        var newVersion = false
        let gzipLevel = min(9, max(1, configuration.gzipLevel))
        for export in exports {
            let before = previous?.entry(for: export.scope)
            if let before, before.current.dataDigest == export.result.dataDigest {
                try? FileManager.default.removeItem(at: export.file)
                entries.append(ScopeEntry(scope: export.scope, retained: Array(before.retained.suffix(configuration.keep))))
                unchangedScopes.insert(export.scope)
                continue
            }
            let object: FileSnapshotStore.StoredObject
            if let shared = storedByDigest[export.result.dataDigest] {
                try? FileManager.default.removeItem(at: export.file)
                object = shared
            } else {
                object = try store.storeObject(dataset: dataset, file: export.file, gzipLevel: gzipLevel)
                storedByDigest[export.result.dataDigest] = object
            }
            newVersion = true
            let record = VersionRecord(
                version: version, sha256: object.sha256, size: object.size, gzipSize: object.gzipSize, createdAt: createdAt,
                schemaVersion: template.schemaVersion, tables: export.result.tables, dataDigest: export.result.dataDigest)
            entries.append(ScopeEntry(scope: export.scope, retained: Array(((before?.retained ?? []) + [record]).suffix(configuration.keep))))
        }
        let sharing = Dictionary(grouping: entries, by: \.sha256)
        let outcomes = entries.map { entry in
            PublishResult.Scope(
                scope: entry.scope, version: entry.version, sha256: entry.sha256, size: entry.size, tables: entry.current.tables,
                unchanged: unchangedScopes.contains(entry.scope), shared: (sharing[entry.sha256]?.count ?? 0) > 1)
        }

        let manifest = ScopedManifest(
            dataset: dataset, schemaVersion: template.schemaVersion, lastVersion: newVersion ? version : (previous?.lastVersion ?? 0),
            createdAt: newVersion ? createdAt : (previous?.createdAt ?? createdAt), scopes: entries)
        let unchanged = previous.map { $0.scopes == manifest.scopes && $0.schemaVersion == manifest.schemaVersion } ?? false
        let seconds = (ContinuousClock.now - started).seconds
        if unchanged, let previous {
            logger.info("data unchanged for every scope; no new version", metadata: ["dataset": "\(dataset)", "scopes": "\(scopes.count)"])
            return PublishResult(scoped: previous, scopes: outcomes, seconds: seconds, unchanged: true)
        }
        try store.commitScoped(manifest)
        let dropped = (previous?.scopes.map(\.scope) ?? []).filter { !scopes.contains($0) }
        logger.info(
            "published scopes",
            metadata: [
                "dataset": "\(dataset)", "version": "\(manifest.lastVersion)", "scopes": "\(scopes.count)",
                "files": "\(Set(entries.map(\.sha256)).count)", "dropped": "\(dropped)", "seconds": "\(seconds)",
            ])
        return PublishResult(scoped: manifest, scopes: outcomes, seconds: seconds, unchanged: false)
    }

    /// Exports every scope into `tmp`, `configuration.parallelism` at a time; the first error stops the rest.
    private func exportAll(
        scopes: [String], main: ExportSession, template: Template, tmp: URL, version: Int, createdAt: String
    ) throws -> [ScopeExport] {
        guard !scopes.isEmpty else { return [] }
        let workers = max(1, min(configuration.parallelism, scopes.count))
        let snapshotID = workers > 1 ? try main.exportSnapshot() : ""
        let state = Locked(ExportState(results: Array(repeating: nil, count: scopes.count)))
        let (databaseURL, progress, afterTable, logger) = (configuration.databaseURL, configuration.progress, afterTable, self.logger)
        let plans = main.plans
        // Each worker owns one session; worker 0 uses the one that exported the snapshot, which stays open (and so
        // keeps the snapshot importable) until every worker is done.
        DispatchQueue.concurrentPerform(iterations: workers) { worker in
            do {
                let session = worker == 0 ? main : try ExportSession(joining: snapshotID, databaseURL: databaseURL, plans: plans)
                let exporter = SnapshotExporter(template: template, logger: logger)
                exporter.progress = progress
                exporter.afterTable = afterTable
                while let index = state.withLock({ $0.next(limit: scopes.count) }) {
                    let file = tmp.appendingPathComponent("\(version)-\(index).sqlite")
                    let result = try exporter.write(plans: plans, from: session.pg, to: file, version: version, createdAt: createdAt, scope: scopes[index])
                    state.withLock { $0.results[index] = ScopeExport(scope: scopes[index], file: file, result: result) }
                }
            } catch {
                state.withLock { $0.fail(error) }
            }
        }
        let final = state.withLock { $0 }
        if let error = final.error { throw error }
        return final.results.map { $0! }
    }
}

/// The shared work list of a parallel scoped export.
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
