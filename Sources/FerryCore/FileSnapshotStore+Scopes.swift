import Foundation

/// Scoped datasets in the file store. Their files are content-addressed, so scopes with identical snapshots share
/// one file, and retention per scope only deletes a file once no retained version of any scope names it:
///
/// ```
/// STORE/DATASET/manifest.json                 a ScopedManifest, replaced atomically
/// STORE/DATASET/objects/<sha256>.sqlite       a snapshot (immutable; its name is its checksum)
/// STORE/DATASET/objects/<sha256>.sqlite.gz    its gzip copy
/// ```
extension FileSnapshotStore {
    public func objectsDirectory(dataset: String) -> URL { directory(dataset: dataset).appendingPathComponent("objects", isDirectory: true) }
    public func objectURL(dataset: String, sha256: String) -> URL { objectsDirectory(dataset: dataset).appendingPathComponent("\(sha256).sqlite") }
    public func objectGzipURL(dataset: String, sha256: String) -> URL { objectsDirectory(dataset: dataset).appendingPathComponent("\(sha256).sqlite.gz") }

    /// `manifest.json` in either form; nil when the dataset has never been published.
    public func storedManifest(for dataset: String) throws -> StoredManifest? {
        guard DatasetName.isValid(dataset) else { return nil }
        let url = manifestURL(dataset: dataset)
        guard let data = FileManager.default.contents(atPath: url.path) else { return nil }
        return try StoredManifest.decode(data, path: url.path)
    }

    /// `createdAt` of the oldest snapshot still retained (of any scope): until it is gone, a device may hold it,
    /// so tombstones younger than this must stay. Nil when the dataset has never been published.
    public func oldestRetainedCreatedAt(dataset: String) throws -> String? {
        switch try storedManifest(for: dataset) {
        case nil: return nil
        case .scoped(let manifest): return manifest.scopes.flatMap(\.retained).map(\.createdAt).min()
        case .single(let manifest):
            guard let oldest = manifest.versions.first else { return manifest.createdAt }
            return try record(dataset: dataset, version: oldest)?.createdAt ?? manifest.createdAt
        }
    }

    /// What ``storeObject(dataset:file:gzipLevel:)`` stored.
    public struct StoredObject: Sendable, Equatable {
        public var sha256: String
        public var size: Int64
        public var gzipSize: Int64
    }

    /// Moves a finished, closed SQLite file from the dataset's temp directory into `objects/` under its checksum,
    /// with a gzip copy, each fsynced before its rename. When an object with the same checksum exists, the file is
    /// identical to it and is simply deleted. Call it while holding the lock; the object is garbage until a
    /// manifest names it (``cleanLeftovers(dataset:)`` removes it after a crash).
    public func storeObject(dataset: String, file: URL, gzipLevel: Int32) throws -> StoredObject {
        let fm = FileManager.default
        try DurableFile.makeDirectory(objectsDirectory(dataset: dataset))
        try DurableFile.sync(file)
        let sha256 = try FileDigest.sha256Hex(of: file)
        let size = Int64((try fm.attributesOfItem(atPath: file.path)[.size] as? NSNumber)?.int64Value ?? 0)
        let target = objectURL(dataset: dataset, sha256: sha256)
        let gzipTarget = objectGzipURL(dataset: dataset, sha256: sha256)
        if fm.fileExists(atPath: target.path), let gzipSize = (try? fm.attributesOfItem(atPath: gzipTarget.path)[.size] as? NSNumber)?.int64Value {
            try? fm.removeItem(at: file)
            return StoredObject(sha256: sha256, size: size, gzipSize: gzipSize)
        }
        let gzipTemp = file.appendingPathExtension("gz")
        let gzipSize = try Gzip.compressFile(from: file, to: gzipTemp, level: gzipLevel)
        try DurableFile.rename(gzipTemp, to: gzipTarget)
        try DurableFile.rename(file, to: target)
        return StoredObject(sha256: sha256, size: size, gzipSize: gzipSize)
    }

    /// Replaces `manifest.json` with `manifest` atomically, then deletes what no retained version names any more:
    /// objects of dropped versions and scopes, and the `versions/` files of an earlier unscoped form of the dataset.
    /// A server holding a deleted file open keeps reading it. Call it while holding the lock.
    public func commitScoped(_ manifest: ScopedManifest) throws {
        try manifest.validate()
        let dataset = manifest.dataset
        for sha in manifest.referencedObjects where !FileManager.default.fileExists(atPath: objectURL(dataset: dataset, sha256: sha).path) {
            throw FerryError(.store, "refusing to write a manifest naming a missing snapshot \(sha)", path: objectsDirectory(dataset: dataset).path)
        }
        try DurableFile.write(try manifest.jsonData(), to: manifestURL(dataset: dataset))
        pruneUnreferenced(dataset: dataset, keeping: manifest.referencedObjects, removeVersions: true)
    }

    /// Deletes object files not in `keeping` (and, with `removeVersions`, every file of `versions/`). Returns the count.
    @discardableResult
    func pruneUnreferenced(dataset: String, keeping: Set<String>, removeVersions: Bool) -> Int {
        let fm = FileManager.default
        var removed = 0
        let objects = objectsDirectory(dataset: dataset)
        for name in (try? fm.contentsOfDirectory(atPath: objects.path)) ?? [] {
            let sha = name.split(separator: ".").first.map(String.init) ?? ""
            if !keeping.contains(sha) {
                try? fm.removeItem(at: objects.appendingPathComponent(name))
                removed += 1
            }
        }
        if removeVersions {
            let versions = versionsDirectory(dataset: dataset)
            for name in (try? fm.contentsOfDirectory(atPath: versions.path)) ?? [] {
                try? fm.removeItem(at: versions.appendingPathComponent(name))
                removed += 1
            }
        }
        return removed
    }
}
