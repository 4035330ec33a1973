import FerryCore
import Foundation

/// The layout written before every dataset was content-addressed, read as it is and migrated by the next publish:
///
/// ```
/// STORE/DATASET/manifest.json          a plain Manifest (the client's wire form)
/// STORE/DATASET/versions/N.sqlite      version N
/// STORE/DATASET/versions/N.sqlite.gz   its gzip copy
/// STORE/DATASET/versions/N.json        its VersionRecord (the same JSON as a record in a StoredManifest)
/// ```
///
/// A server reads such a store as it is (``FileSnapshotStore/storedManifest(for:)`` converts it, with
/// ``StoredManifest/isLegacyLayout`` set so ``FileSnapshotStore/files(of:in:)`` names `versions/N.sqlite`). The
/// publisher migrates it under the dataset's lock before it publishes
/// (``FileSnapshotStore/migrateLegacyLayout(dataset:)``):
/// hard links (or fsynced copies) into `objects/`, then the new `manifest.json` atomically, then `versions/` is
/// deleted. A crash at any point leaves a manifest that names complete files, and the next publish finishes the job.
extension FileSnapshotStore {
    func versionsDirectory(dataset: String) -> URL {
        directory(dataset: dataset).appendingPathComponent("versions", isDirectory: true)
    }

    func legacyFiles(dataset: String, version: Int) -> SnapshotFiles {
        let directory = versionsDirectory(dataset: dataset)
        return SnapshotFiles(
            snapshot: directory.appendingPathComponent("\(version).sqlite"),
            gzip: directory.appendingPathComponent("\(version).sqlite.gz"))
    }

    /// A legacy `manifest.json` is a plain ``Manifest``: it has no `scopes` key.
    static func isLegacyManifest(_ data: Data) -> Bool {
        // Not a JSON object: not legacy, and StoredManifest.decode reports the error with the path.
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            return false
        }
        return object["scopes"] == nil && object["version"] != nil
    }

    /// Converts a legacy manifest and its `versions/N.json` records. A retained version whose record is gone
    /// (pruned while we read) is skipped; the current one must be there.
    func legacyManifest(dataset: String, data: Data) throws -> StoredManifest {
        let path = manifestURL(dataset: dataset).path
        let manifest = try Manifest.decode(data, path: path)
        guard manifest.dataset == dataset else {
            throw FerryError(
                .store, "manifest names dataset '\(manifest.dataset)' but lives in '\(dataset)'", path: path,
                key: "dataset")
        }
        var records: [VersionRecord] = []
        for version in Set(manifest.versions + [manifest.version]).sorted() {
            let url = versionsDirectory(dataset: dataset).appendingPathComponent("\(version).json")
            guard let recordData = FileManager.default.contents(atPath: url.path) else { continue }
            do {
                records.append(try JSONDecoder().decode(VersionRecord.self, from: recordData))
            } catch {
                throw FerryError(.store, "version record is not valid JSON: \(error)", path: url.path)
            }
        }
        guard let current = records.last, current.version == manifest.version, current.sha256 == manifest.sha256 else {
            throw FerryError(
                .store, "the current version's record is missing or differs from manifest.json", path: path,
                key: "sha256")
        }
        var stored = StoredManifest(
            dataset: dataset, scoped: false, schemaVersion: manifest.schemaVersion, lastVersion: manifest.version,
            createdAt: manifest.createdAt, scopes: [ScopeEntry(scope: nil, retained: records)])
        stored.isLegacyLayout = true
        try stored.validate(path: path)
        return stored
    }

    /// Moves a legacy dataset to the current layout; does nothing to one already there but delete a `versions/`
    /// left by an interrupted migration. Call it while holding the lock.
    public func migrateLegacyLayout(dataset: String) throws {
        try migrateLegacyLayout(dataset: dataset, manifest: storedManifest(for: dataset))
    }

    /// ``migrateLegacyLayout(dataset:)`` of `manifest`, the dataset's manifest as just read; returns it as it is now.
    @discardableResult
    func migrateLegacyLayout(dataset: String, manifest: StoredManifest?) throws -> StoredManifest? {
        guard var current = manifest else { return nil }
        if current.isLegacyLayout {
            try DurableFile.makeDirectory(objectsDirectory(dataset: dataset))
            for record in current.scopes.flatMap(\.retained) {
                let old = legacyFiles(dataset: dataset, version: record.version)
                try Self.linkOrCopy(old.snapshot, to: objectURL(dataset: dataset, sha256: record.sha256))
                if FileManager.default.fileExists(atPath: old.gzip.path) {
                    try Self.linkOrCopy(old.gzip, to: objectGzipURL(dataset: dataset, sha256: record.sha256))
                } else {
                    // A legacy store could lack a gzip copy (the server then served identity only): make one now.
                    let temp = temporaryDirectory(dataset: dataset).appendingPathComponent("\(record.sha256).sqlite.gz")
                    try DurableFile.makeDirectory(temp.deletingLastPathComponent())
                    _ = try Gzip.compressFile(from: old.snapshot, to: temp, level: 6)
                    try DurableFile.rename(temp, to: objectGzipURL(dataset: dataset, sha256: record.sha256))
                }
            }
            try DurableFile.syncDirectory(objectsDirectory(dataset: dataset))
            current.isLegacyLayout = false
            try commit(current)
        }
        try DurableFile.remove(versionsDirectory(dataset: dataset))
        return current
    }

    /// A hard link (the same bytes, no copy); a fsynced copy where the file system cannot link. An existing
    /// target has the same checksum, so the same bytes, and is kept.
    static func linkOrCopy(_ source: URL, to target: URL) throws {
        let fm = FileManager.default
        guard !fm.fileExists(atPath: target.path) else { return }
        do {
            try fm.linkItem(at: source, to: target)
        } catch {
            let temp = target.deletingLastPathComponent().appendingPathComponent(".\(target.lastPathComponent).tmp")
            do {
                try DurableFile.remove(temp)
                try fm.copyItem(at: source, to: temp)
            } catch {
                throw FerryError(
                    .io, "cannot copy a snapshot into objects/: \(error.localizedDescription)", path: source.path)
            }
            try DurableFile.sync(temp)
            try DurableFile.rename(temp, to: target)
        }
    }
}
