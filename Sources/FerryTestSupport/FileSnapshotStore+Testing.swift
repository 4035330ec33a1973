import FerryCore
import FerryStore
import Foundation

extension FileSnapshotStore {
    /// The SQLite file of retained `version` (of `scope`, nil for an unscoped dataset); throws when not retained.
    public func snapshotURL(dataset: String, version: Int, scope: String? = nil) throws -> URL {
        try retainedFiles(dataset: dataset, version: version, scope: scope).snapshot
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

    private func retainedFiles(dataset: String, version: Int, scope: String?) throws -> SnapshotFiles {
        guard let files = try files(dataset: dataset, version: version, scope: scope) else {
            throw FerryError(.notFound, "version \(version) of \(dataset) is not retained")
        }
        return files
    }
}

extension StoredManifest {
    /// The file names `objects/` must hold for this manifest, sorted: each retained snapshot with its gzip copy,
    /// each retained version's patches, and the row index of each scope's current version (which only a version
    /// this code published has).
    public var expectedObjectFileNames: [String] {
        let records = scopes.flatMap(\.retained)
        let snapshots = Set(records.map(\.sha256)).flatMap { ["\($0).sqlite", "\($0).sqlite.gz"] }
        let patches = Set(records.flatMap { ($0.patches ?? []).map(\.sha256) }).map { "\($0).patch.gz" }
        let rowIndexes = Set(scopes.map(\.current.sha256)).map { "\($0).rows" }
        return (snapshots + patches + rowIndexes).sorted()
    }
}
