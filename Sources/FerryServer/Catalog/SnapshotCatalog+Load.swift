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
        // Files built on request that no retained version names any more go, with the catch-up patches to the
        // previous version; a download holding one open keeps reading it.
        builds.prune(dataset: name, keeping: Set(manifest.scopes.flatMap(\.retained).map(\.sha256)))
        var state = DatasetState(
            access: access, identity: identity, lastVersion: manifest.lastVersion, createdAt: manifest.createdAt,
            oldestRetainedCreatedAt: manifest.oldestRetainedCreatedAt, objects: files.objects)
        state.patchFiles = files.patchFiles
        state.retiredAt = manifest.retiredAt
        state.partitioning = manifest.partitioning
        state.retiredPartitions = Set(manifest.retiredPartitions ?? [])
        if let horizon = manifest.patchHorizon, horizon > 0 {
            var steps: [String: Int64] = [:]
            for entry in manifest.scopes {
                for record in entry.chain where record.version > entry.catchUpFrom {
                    if let step = record.step { steps[step.sha256] = step.size }
                }
            }
            var tiers: [String: Int] = [:]
            var names: [String] = []
            for entry in manifest.scopes {
                for (name, points) in HistoryTiers().points(of: entry.chain, now: Date()) {
                    if tiers[name] == nil { names.append(name) }
                    tiers[name, default: 0] += points
                }
            }
            state.history = StatusReport.History(
                horizonSeconds: horizon,
                oldestVersion: manifest.scopes.map(\.catchUpFrom).min() ?? manifest.lastVersion,
                steps: steps.count, bytes: steps.values.reduce(0, +),
                tiers: names.map { StatusReport.Tier(name: $0, points: tiers[$0]!) })
        }
        return state
    }

    /// The files one load has opened (or taken over from the previous state), by checksum.
    struct OpenFiles {
        let previous: DatasetState?
        var objects: [String: OpenObject] = [:]
        var patchFiles: [String: OpenFile] = [:]
    }

    /// The view of one scope `entry`: its checkpoints' files, open, its patches, and its versions stored as steps,
    /// served as they are asked for: a device takes the newest checkpoint and the patch from it that the publisher
    /// wrote (the manifest's `checkpoint`), and a client that asks for a step version whole gets it built on request
    /// (``VersionBuilds``). Loading a version costs reading its manifest and opening its patches, whatever the
    /// file's size. A current version whose checkpoint's file is missing fails the load, so the previous state stays
    /// served.
    func openView(of entry: ScopeEntry, in manifest: StoredManifest, files: inout OpenFiles) throws -> SnapshotView {
        let name = manifest.dataset
        var versions: [Int: VersionEntry] = [:]
        var steps: [Int: VersionBuilds.Request] = [:]
        var patches: [PatchKey: VersionEntry] = [:]
        for record in entry.retained {
            for patch in record.patches ?? [] {
                guard let file = try openPatch(patch, dataset: name, files: &files) else {
                    // A current version stored as a step is served from its patches: one missing or damaged fails
                    // the load, and the previous state stays served.
                    guard record.isCheckpoint || record.version != entry.current.version else {
                        throw FerryError(
                            .store,
                            "\(entry.scope.map { "scope '\($0)': " } ?? "")version \(record.version)'s patch from version \(patch.from) is missing or damaged",
                            path: store.patchURL(dataset: name, sha256: patch.sha256).path)
                    }
                    continue
                }
                patches[PatchKey(from: patch.from, to: patch.to)] = .patch(
                    dataset: name, patch, to: record, file: file, scoped: manifest.scoped)
            }
            guard record.isCheckpoint else {
                steps[record.version] = VersionBuilds.Request(
                    dataset: name, record: record, entry: entry, manifest: manifest, scoped: manifest.scoped)
                continue
            }
            let paths = store.files(of: record, in: manifest)
            guard
                let object = try files.objects[record.sha256] ?? files.previous?.objects[record.sha256]
                    ?? openObject(snapshotPath: paths.snapshot.path, gzipPath: paths.gzip.path, record: record)
            else { continue }
            files.objects[record.sha256] = object
            versions[record.version] = VersionEntry(
                dataset: name, record: record, snapshot: object.snapshot, gzipFile: object.gzip,
                gzipSHA256: object.gzipSHA256, scoped: manifest.scoped)
        }
        let checkpoint = entry.retained.last(where: \.isCheckpoint)
        guard versions[entry.current.version] != nil || checkpoint.map({ versions[$0.version] != nil }) == true else {
            throw FerryError(
                .store,
                "\(entry.scope.map { "scope '\($0)': " } ?? "")the file of the checkpoint the current version builds from is missing",
                path: store.files(of: checkpoint ?? entry.current, in: manifest).snapshot.path)
        }
        var manifestOut = entry.manifest(dataset: name)
        manifestOut.versions = manifestOut.versions.filter { versions[$0] != nil || steps[$0] != nil }
        // A new device takes the checkpoint's gzip copy and the publisher's patch from it to the current version:
        // the manifest names the checkpoint, and as the current version's gzipSize what that start downloads.
        if let checkpoint, checkpoint.version != entry.current.version,
            let start = patches[PatchKey(from: checkpoint.version, to: entry.current.version)]
        {
            var published = checkpoint.published
            published.patches = nil
            manifestOut.checkpoint = published
            manifestOut.current.gzipSize = checkpoint.gzipSize + start.identity.size
        }
        // With a patch horizon, a device on any version the steps lead on from gets one patch (CatchUp).
        var catchUp: CatchUp?
        if (manifest.patchHorizon ?? 0) > 0, entry.catchUpFrom < entry.current.version, let checkpoint {
            manifestOut.catchUpFrom = entry.catchUpFrom
            catchUp = CatchUp(
                dataset: name, from: entry.catchUpFrom, chain: entry.chain, builds: builds, scoped: manifest.scoped,
                limit: checkpoint.gzipSize > 0 ? checkpoint.gzipSize : checkpoint.size, logger: logger)
        }
        return try SnapshotView(
            manifest: manifestOut, scoped: manifest.scoped, versions: versions, steps: steps, builds: builds,
            patches: patches, catchUp: catchUp)
    }

    /// A patch's file, checked against its size and, when first opened, its SHA-256 (a patch is small beside the
    /// files it saves); nil and a warning when it is missing or damaged: such a patch is never served.
    func openPatch(_ patch: PatchRef, dataset name: String, files: inout OpenFiles) throws -> OpenFile? {
        let path = store.patchURL(dataset: name, sha256: patch.sha256).path
        if let known = files.patchFiles[patch.sha256] ?? files.previous?.patchFiles[patch.sha256] {
            files.patchFiles[patch.sha256] = known
            return known
        }
        guard let file = try OpenFile.open(path: path) else {
            logger.warning(
                "a patch named by the manifest is missing; devices take the full download",
                metadata: ["path": .string(path)])
            return nil
        }
        guard file.size == patch.size, try file.sha256Hex() == patch.sha256 else {
            logger.error(
                "a patch named by the manifest does not match its size and SHA-256; it is not served",
                metadata: ["path": .string(path), "size": "\(file.size)", "recorded": "\(patch.size)"])
            return nil
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
            if file.size == record.gzipSize {
                return OpenObject(snapshot: snapshot, gzip: file, gzipSHA256: try file.sha256Hex())
            }
            logger.warning("gzip copy has the wrong size; serving identity only", metadata: ["path": .string(gzipPath)])
        }
        return OpenObject(snapshot: snapshot, gzip: nil, gzipSHA256: nil)
    }
}
