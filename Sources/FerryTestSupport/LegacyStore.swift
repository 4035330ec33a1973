import FerryCore
import FerryStore
import Foundation

/// Writes a dataset in the store layout Ferry used before every dataset was content-addressed, byte for byte as
/// that code's `FileSnapshotStore.commit` did: `versions/N.sqlite`, `N.sqlite.gz`, `N.json` (the version record,
/// sorted keys) and `manifest.json` (the client's ``Manifest``, sorted keys, slashes unescaped).
public enum LegacyStore {
    /// Adds `snapshot` (moved) as `version` and rewrites the manifest to retain `retained`. Returns the manifest.
    @discardableResult
    public static func commit(
        root: URL, dataset: String, version: Int, snapshot: URL, tables: [String: Int], retained: [Int],
        createdAt: String = Timestamp.format(Date())
    ) throws -> Manifest {
        let versions = root.appendingPathComponent(dataset).appendingPathComponent("versions")
        try DurableFile.makeDirectory(versions)
        let sha256 = try FileDigest.sha256Hex(of: snapshot)
        let size =
            (try FileManager.default.attributesOfItem(atPath: snapshot.path)[.size] as? NSNumber)?.int64Value ?? 0
        let gzipSize = try Gzip.compressFile(
            from: snapshot, to: versions.appendingPathComponent("\(version).sqlite.gz"), level: 6)
        try FileManager.default.moveItem(at: snapshot, to: versions.appendingPathComponent("\(version).sqlite"))
        let published = PublishedVersion(
            version: version, sha256: sha256, size: size, gzipSize: gzipSize, createdAt: createdAt, schemaVersion: 1,
            tables: tables)
        let recordEncoder = JSONEncoder()
        recordEncoder.outputFormatting = [.sortedKeys]
        try recordEncoder.encode(VersionRecord(published: published, dataDigest: String(repeating: "d", count: 64)))
            .write(to: versions.appendingPathComponent("\(version).json"))
        let manifest = Manifest(dataset: dataset, current: published, versions: retained)
        try manifest.jsonData().write(to: root.appendingPathComponent(dataset).appendingPathComponent("manifest.json"))
        return manifest
    }
}
