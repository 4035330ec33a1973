import FerryCore
import FerryStore
import Foundation

extension FileSnapshotStore {
    /// The SQLite file of retained `version` (of `scope`, nil for an unscoped dataset); throws when not retained.
    public func snapshotURL(dataset: String, version: Int, scope: String? = nil) throws -> URL {
        try retainedFiles(dataset: dataset, version: version, scope: scope).snapshot
    }

    /// The SQLite file of the retained version (of any scope) whose checksum is `sha256`: a checkpoint's object, or
    /// the version built from its steps as a server builds it; throws when no retained version has it.
    public func fileURL(dataset: String, sha256: String) throws -> URL {
        guard let manifest = try storedManifest(for: dataset),
            let (entry, record) = manifest.scopes.lazy.compactMap({ entry in
                entry.retained.first { $0.sha256 == sha256 }.map { (entry, $0) }
            }).first
        else {
            throw FerryError(.notFound, "no retained version of \(dataset) has checksum \(sha256)")
        }
        return try retainedFiles(dataset: dataset, version: record.version, scope: entry.scope).snapshot
    }

    /// The gzip copy of retained `version`; throws when not retained.
    public func gzipURL(dataset: String, version: Int, scope: String? = nil) throws -> URL {
        try retainedFiles(dataset: dataset, version: version, scope: scope).gzip
    }

    /// The stored manifest of a dataset that must exist.
    public func requireManifest(_ dataset: String) throws -> StoredManifest {
        guard let manifest = try storedManifest(for: dataset) else {
            throw FerryError(.notFound, "dataset \(dataset) has no manifest")
        }
        return manifest
    }

    /// The entries of `objects/`, sorted.
    public func objectFileNames(dataset: String) throws -> [String] {
        let path = objectsDirectory(dataset: dataset).path
        guard FileManager.default.fileExists(atPath: path) else { return [] }
        return try FileManager.default.contentsOfDirectory(atPath: path).sorted()
    }

    /// A retained version's files: a checkpoint's in the store; a version stored as a step built (with a gzip copy)
    /// in `STORE/.ferry-test-built/DATASET/`, as a server builds it.
    private func retainedFiles(dataset: String, version: Int, scope: String?) throws -> SnapshotFiles {
        guard let manifest = try storedManifest(for: dataset), let entry = manifest.entry(for: scope),
            let record = entry.record(version: version)
        else {
            throw FerryError(.notFound, "version \(version) of \(dataset) is not retained")
        }
        if record.isCheckpoint { return files(of: record, in: manifest) }
        let builder = VersionBuilder(
            store: self, cache: root.appendingPathComponent(".ferry-test-built/\(dataset)", isDirectory: true))
        let file = try builder.file(of: record, in: entry, manifest: manifest)
        let gzip = file.appendingPathExtension("gz")
        if !FileManager.default.fileExists(atPath: gzip.path) {
            _ = try Gzip.compressAndHashParallel(from: file, to: gzip, level: 1)
        }
        return SnapshotFiles(snapshot: file, gzip: gzip)
    }
}

extension StoredManifest {
    /// The file names `objects/` must hold for this manifest, sorted: each retained checkpoint with its gzip copy,
    /// each other version's step, each retained version's patches, and the row index of each scope's current version
    /// when it is a checkpoint (which only a version this code published has; a step's is in the work directory).
    public var expectedObjectFileNames: [String] {
        let records = scopes.flatMap(\.chain)
        let snapshots = Set(records.filter(\.isCheckpoint).map(\.sha256)).flatMap {
            ["\($0).sqlite", "\($0).sqlite.gz"]
        }
        let patches = Set(records.flatMap { ($0.patches ?? []).map(\.sha256) + ($0.step.map { [$0.sha256] } ?? []) })
            .map { "\($0).patch.gz" }
        let rowIndexes = Set(scopes.map(\.current).filter(\.isCheckpoint).map(\.sha256)).map { "\($0).rows" }
        return (snapshots + patches + rowIndexes).sorted()
    }
}
