import FerryCore
import FerryStore
import Foundation
import Logging

/// Loading one dataset's manifest into a ``SnapshotCatalog/DatasetState``.
extension SnapshotCatalog {
    /// Opens every file the manifest names (once per checksum, reusing the previous state's) and builds one view per
    /// scope: the single implicit scope of an unscoped dataset is everyone's view. A missing current file is an
    /// error; a missing older one is skipped (retention raced us).
    func load(dataset name: String, identity: StoreRevision, previous: DatasetState?) throws -> DatasetState {
        let manifestPath = store.manifestURL(dataset: name).path
        guard let manifest = try store.storedManifest(for: name) else {
            throw FerryError(.io, "cannot read manifest", path: manifestPath)
        }
        guard manifest.dataset == name else {
            throw FerryError(
                .store, "manifest names dataset '\(manifest.dataset)' but lives in '\(name)'", path: manifestPath,
                key: "dataset")
        }
        var files = OpenFiles(previous: previous)
        var views: [String: SnapshotView] = [:]
        var everyone: SnapshotView?
        for entry in manifest.scopes {
            let view = try openView(of: entry, in: manifest, files: &files)
            if let scope = entry.scope { views[scope] = view } else { everyone = view }
        }
        let access: DatasetState.Access
        if manifest.scoped {
            access = .scoped(views)
        } else if let everyone {
            access = .everyone(everyone)
        } else {
            throw FerryError(.store, "the manifest names no version", path: manifestPath, key: "scopes")
        }
        // Built files no retained version names any more go; a download holding one open keeps reading it.
        builder(for: name).prune(keeping: Set(manifest.scopes.flatMap(\.retained).map(\.sha256)))
        var state = DatasetState(
            access: access, identity: identity, lastVersion: manifest.lastVersion, createdAt: manifest.createdAt,
            oldestRetainedCreatedAt: manifest.oldestRetainedCreatedAt, objects: files.objects)
        state.patchFiles = files.patchFiles
        state.retiredAt = manifest.retiredAt
        if let horizon = manifest.patchHorizon, horizon > 0 {
            var steps: [String: Int64] = [:]
            for entry in manifest.scopes {
                for record in entry.chain where record.version > entry.catchUpFrom {
                    if let step = record.step { steps[step.sha256] = step.size }
                }
            }
            state.history = StatusReport.History(
                horizonSeconds: horizon,
                oldestVersion: manifest.scopes.map(\.catchUpFrom).min() ?? manifest.lastVersion,
                steps: steps.count, bytes: steps.values.reduce(0, +))
        }
        return state
    }

    /// The files one load has opened (or taken over from the previous state), by checksum.
    struct OpenFiles {
        let previous: DatasetState?
        var objects: [String: OpenObject] = [:]
        var patchFiles: [String: OpenFile] = [:]
    }

    /// The builder of dataset `name`'s versions stored as steps.
    func builder(for name: String) -> VersionBuilder {
        VersionBuilder(store: store, cache: buildCache.appendingPathComponent(name, isDirectory: true))
    }

    /// The view of one scope `entry`: its retained versions whose files are there, and their patches. A version
    /// stored as a step is served in full once built: the current one is built now (an error fails the load, so the
    /// previous state stays served); an older one only if it was built while it was current.
    func openView(of entry: ScopeEntry, in manifest: StoredManifest, files: inout OpenFiles) throws -> SnapshotView {
        let name = manifest.dataset
        var versions: [Int: VersionEntry] = [:]
        var patches: [PatchKey: VersionEntry] = [:]
        var served = entry
        for (index, stored) in entry.retained.enumerated() {
            var record = stored
            for patch in record.patches ?? [] {
                guard let file = try openPatch(patch, dataset: name, files: &files) else { continue }
                patches[PatchKey(from: patch.from, to: patch.to)] = .patch(
                    dataset: name, patch, to: record, file: file, scoped: manifest.scoped)
            }
            let object: OpenObject
            if let known = files.objects[record.sha256] ?? files.previous?.objects[record.sha256] {
                object = known
            } else if let paths = try builtFiles(
                of: record, in: entry, manifest: manifest, build: record.version == entry.current.version),
                let opened = try openObject(
                    snapshotPath: paths.snapshot.path, gzipPath: paths.gzip.path, record: record)
            {
                object = opened
            } else {
                continue
            }
            files.objects[record.sha256] = object
            // The gzip copy of a built version is the server's own: the manifest names its size.
            if !record.isCheckpoint, let gzip = object.gzip { record.published.gzipSize = gzip.size }
            served.retained[index] = record
            versions[record.version] = VersionEntry(
                dataset: name, record: record, snapshot: object.snapshot, gzipFile: object.gzip,
                gzipSHA256: object.gzipSHA256,
                scoped: manifest.scoped)
        }
        guard let latest = versions[entry.current.version] else {
            throw FerryError(
                .store, "\(entry.scope.map { "scope '\($0)': " } ?? "")the current snapshot's file is missing",
                path: store.files(of: entry.current, in: manifest).snapshot.path)
        }
        // The manifest lists the versions served in full, with the sizes of the built ones' gzip copies.
        var manifestOut = served.manifest(dataset: name)
        manifestOut.versions = manifestOut.versions.filter { versions[$0] != nil }
        // With a patch horizon, a device on any version the steps lead on from gets one patch (CatchUp).
        var catchUp: CatchUp?
        if (manifest.patchHorizon ?? 0) > 0, entry.catchUpFrom < entry.current.version {
            manifestOut.catchUpFrom = entry.catchUpFrom
            catchUp = CatchUp(
                dataset: name, from: entry.catchUpFrom, chain: entry.chain, builder: builder(for: name),
                scoped: manifest.scoped, limit: latest.gzip?.size ?? latest.identity.size, logger: logger)
        }
        return try SnapshotView(
            manifest: manifestOut, scoped: manifest.scoped, latest: latest, versions: versions, patches: patches,
            catchUp: catchUp)
    }

    /// The files of `record`: a checkpoint's in the store; a step's built in the cache, with a gzip copy made beside
    /// it (now when `build`, else only when built before). Nil when not built and not to be built now.
    func builtFiles(of record: VersionRecord, in entry: ScopeEntry, manifest: StoredManifest, build: Bool) throws
        -> SnapshotFiles?
    {
        if record.isCheckpoint { return store.files(of: record, in: manifest) }
        let builder = builder(for: manifest.dataset)
        let built = builder.builtURL(sha256: record.sha256)
        let gzip = built.appendingPathExtension("gz")
        if FileManager.default.fileExists(atPath: gzip.path) { return SnapshotFiles(snapshot: built, gzip: gzip) }
        guard build else { return nil }
        let started = ContinuousClock.now
        let file = try builder.file(of: record, in: entry, manifest: manifest)
        let scratch = builder.cache.appendingPathComponent("tmp/\(record.sha256)-\(UUID().uuidString).gz")
        do {
            _ = try Gzip.compressAndHashParallel(from: file, to: scratch, encoding: gzipEncoding)
            try DurableFile.rename(scratch, to: gzip)
        } catch {
            try? FileManager.default.removeItem(at: scratch)  // scratch of this call; the error says what failed
            throw error
        }
        logger.info(
            "built a version stored as a step",
            metadata: [
                "dataset": "\(manifest.dataset)", "version": "\(record.version)",
                "seconds": "\((ContinuousClock.now - started).inSeconds)",
            ])
        return SnapshotFiles(snapshot: file, gzip: gzip)
    }

    /// A patch's file, checked against its size; nil (and a warning) when it is missing.
    func openPatch(_ patch: PatchRef, dataset name: String, files: inout OpenFiles) throws -> OpenFile? {
        let path = store.patchURL(dataset: name, sha256: patch.sha256).path
        guard
            let file = try files.patchFiles[patch.sha256] ?? files.previous?.patchFiles[patch.sha256]
                ?? OpenFile.open(path: path)
        else {
            logger.warning(
                "a patch named by the manifest is missing; devices take the full download",
                metadata: ["path": .string(path)])
            return nil
        }
        guard file.size == patch.size else {
            throw FerryError(.store, "patch is \(file.size) bytes but its record says \(patch.size)", path: path)
        }
        files.patchFiles[patch.sha256] = file
        return file
    }

    /// Opens a snapshot file and its gzip copy, checking their sizes against the record; nil when the snapshot is gone.
    func openObject(snapshotPath path: String, gzipPath: String, record: VersionRecord) throws -> OpenObject? {
        guard let snapshot = try OpenFile.open(path: path) else { return nil }
        guard snapshot.size == record.size else {
            throw FerryError(
                .store, "snapshot is \(snapshot.size) bytes but its record says \(record.size)", path: path)
        }
        if let file = try OpenFile.open(path: gzipPath) {
            // A built version's gzip copy is the server's own, and its record carries no size for it.
            if file.size == record.gzipSize || !record.isCheckpoint {
                return OpenObject(snapshot: snapshot, gzip: file, gzipSHA256: try file.sha256Hex())
            }
            logger.warning("gzip copy has the wrong size; serving identity only", metadata: ["path": .string(gzipPath)])
        }
        return OpenObject(snapshot: snapshot, gzip: nil, gzipSHA256: nil)
    }
}
