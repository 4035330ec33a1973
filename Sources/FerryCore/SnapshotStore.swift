import Foundation

/// Read access to published snapshots: what the server needs. Each method's contract:
/// - ``datasets()`` lists datasets that have a manifest, sorted by name.
/// - ``manifest(for:)`` returns the latest manifest, or nil when the dataset has never been published.
/// - ``record(dataset:version:)`` returns a retained version's record, or nil once pruned.
/// - ``snapshotURL(dataset:version:)`` / ``gzipURL(dataset:version:)`` name complete, immutable files:
///   a file is only ever referenced after it was fsynced and renamed into place.
public protocol SnapshotStore: Sendable {
    func datasets() throws -> [String]
    func manifest(for dataset: String) throws -> Manifest?
    func record(dataset: String, version: Int) throws -> VersionRecord?
    func snapshotURL(dataset: String, version: Int) -> URL
    func gzipURL(dataset: String, version: Int) -> URL
}

/// The file-system snapshot store. Layout, per dataset:
///
/// ```
/// STORE/DATASET/manifest.json          latest Manifest, replaced atomically
/// STORE/DATASET/versions/N.sqlite      snapshot of version N (immutable)
/// STORE/DATASET/versions/N.sqlite.gz   its gzip copy
/// STORE/DATASET/versions/N.json        its VersionRecord
/// STORE/DATASET/objects/             a scoped dataset's snapshots, by checksum (FileSnapshotStore+Scopes.swift)
/// STORE/DATASET/tmp/                   the publisher's temp area; anything here is garbage after a crash
/// STORE/DATASET/.lock                  held by the one publisher working on the dataset
/// ```
///
/// ```swift
/// let store = FileSnapshotStore(root: URL(fileURLWithPath: "snapshots"))
/// let manifest = try store.manifest(for: "campgrounds")
/// ```
public struct FileSnapshotStore: SnapshotStore {
    public let root: URL

    public init(root: URL) {
        self.root = root.standardizedFileURL
    }

    public func directory(dataset: String) -> URL { root.appendingPathComponent(dataset, isDirectory: true) }
    public func manifestURL(dataset: String) -> URL { directory(dataset: dataset).appendingPathComponent("manifest.json") }
    public func versionsDirectory(dataset: String) -> URL { directory(dataset: dataset).appendingPathComponent("versions", isDirectory: true) }
    public func temporaryDirectory(dataset: String) -> URL { directory(dataset: dataset).appendingPathComponent("tmp", isDirectory: true) }
    public func snapshotURL(dataset: String, version: Int) -> URL { versionsDirectory(dataset: dataset).appendingPathComponent("\(version).sqlite") }
    public func gzipURL(dataset: String, version: Int) -> URL { versionsDirectory(dataset: dataset).appendingPathComponent("\(version).sqlite.gz") }
    public func recordURL(dataset: String, version: Int) -> URL { versionsDirectory(dataset: dataset).appendingPathComponent("\(version).json") }

    public func datasets() throws -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []
        return names.filter { DatasetName.isValid($0) && FileManager.default.fileExists(atPath: manifestURL(dataset: $0).path) }.sorted()
    }

    /// The manifest of an unscoped dataset; nil when never published or scoped (see ``storedManifest(for:)``).
    public func manifest(for dataset: String) throws -> Manifest? {
        guard case .single(let manifest) = try storedManifest(for: dataset) else { return nil }
        return manifest
    }

    public func record(dataset: String, version: Int) throws -> VersionRecord? {
        guard DatasetName.isValid(dataset), version >= 1 else { return nil }
        let url = recordURL(dataset: dataset, version: version)
        guard let data = FileManager.default.contents(atPath: url.path) else { return nil }
        do {
            return try JSONDecoder().decode(VersionRecord.self, from: data)
        } catch {
            throw FerryError(.store, "version record is not valid JSON: \(error)", path: url.path)
        }
    }

    /// Takes the dataset's publisher lock. With `wait: false`, fails at once if another publisher holds it.
    public func lock(dataset: String, wait: Bool) throws -> FileLock {
        try DurableFile.makeDirectory(directory(dataset: dataset))
        return try FileLock(path: directory(dataset: dataset).appendingPathComponent(".lock").path, wait: wait)
    }

    /// Removes what a crashed publisher left behind: everything in `tmp/` and version files that no manifest
    /// references and that are newer than the latest version. Call it while holding the lock.
    /// Returns the number of files removed.
    @discardableResult
    public func cleanLeftovers(dataset: String) throws -> Int {
        let fm = FileManager.default
        var removed = 0
        let tmp = temporaryDirectory(dataset: dataset)
        for name in (try? fm.contentsOfDirectory(atPath: tmp.path)) ?? [] {
            try? fm.removeItem(at: tmp.appendingPathComponent(name))
            removed += 1
        }
        let stored = try storedManifest(for: dataset)
        if case .scoped(let scoped) = stored {
            return removed + pruneUnreferenced(dataset: dataset, keeping: scoped.referencedObjects, removeVersions: true)
        }
        removed += pruneUnreferenced(dataset: dataset, keeping: [], removeVersions: false)
        let retained: Set<Int>
        if case .single(let manifest) = stored { retained = Set(manifest.versions) } else { retained = [] }
        let versionsDir = versionsDirectory(dataset: dataset)
        for name in (try? fm.contentsOfDirectory(atPath: versionsDir.path)) ?? [] {
            guard let number = Self.versionNumber(fileName: name) else {
                if name.hasPrefix(".") && name.hasSuffix(".tmp") {
                    try? fm.removeItem(at: versionsDir.appendingPathComponent(name))
                    removed += 1
                }
                continue
            }
            if !retained.contains(number) {
                try? fm.removeItem(at: versionsDir.appendingPathComponent(name))
                removed += 1
            }
        }
        return removed
    }

    /// The version number the next publish gets: one more than any version the store has seen, so a number,
    /// and so an immutable URL, is never reused even after a crash left an unreferenced file.
    public func nextVersion(dataset: String) throws -> Int {
        var highest = try storedManifest(for: dataset)?.lastVersion ?? 0
        let names = (try? FileManager.default.contentsOfDirectory(atPath: versionsDirectory(dataset: dataset).path)) ?? []
        for name in names { if let n = Self.versionNumber(fileName: name) { highest = max(highest, n) } }
        return highest + 1
    }

    /// Latest version's record, used to tell "unchanged".
    public func latestRecord(dataset: String) throws -> VersionRecord? {
        guard let manifest = try manifest(for: dataset) else { return nil }
        return try record(dataset: dataset, version: manifest.version)
    }

    /// Publishes a finished SQLite file as `version`: hashes it, writes the gzip copy, fsyncs and renames both into
    /// `versions/`, writes the version record, replaces `manifest.json` atomically, then prunes versions beyond
    /// `keep`. Call it while holding the lock. `snapshot` must be inside the dataset's temp directory and closed.
    /// `gzipLevel` is zlib's 1 (fastest) … 9 (smallest).
    public func commit(
        dataset: String, version: Int, snapshot: URL, schemaVersion: Int, tables: [String: Int], dataDigest: String,
        createdAt: String, keep: Int, gzipLevel: Int32 = 6
    ) throws -> Manifest {
        precondition(keep >= 1, "keep must be at least 1")
        let fm = FileManager.default
        try DurableFile.makeDirectory(versionsDirectory(dataset: dataset))
        try DurableFile.sync(snapshot)
        let sha256 = try FileDigest.sha256Hex(of: snapshot)
        let size = Int64((try fm.attributesOfItem(atPath: snapshot.path)[.size] as? NSNumber)?.int64Value ?? 0)
        let gzipTemp = snapshot.appendingPathExtension("gz")
        let gzipSize = try Gzip.compressFile(from: snapshot, to: gzipTemp, level: gzipLevel)

        // Files first, then the record, then the manifest: a crash before the manifest leaves the old one
        // pointing at old, complete files, and the new files are cleaned up as leftovers.
        try DurableFile.rename(gzipTemp, to: gzipURL(dataset: dataset, version: version))
        try DurableFile.rename(snapshot, to: snapshotURL(dataset: dataset, version: version))
        let record = VersionRecord(
            version: version, sha256: sha256, size: size, gzipSize: gzipSize, createdAt: createdAt,
            schemaVersion: schemaVersion, tables: tables, dataDigest: dataDigest)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try DurableFile.write(try encoder.encode(record), to: recordURL(dataset: dataset, version: version))

        let previous = try manifest(for: dataset)?.versions ?? []
        let all = (previous + [version]).sorted()
        let retained = Array(all.suffix(keep))
        let manifest = record.manifest(dataset: dataset, versions: retained)
        try DurableFile.write(try manifest.jsonData(), to: manifestURL(dataset: dataset))

        // Prune only after the new manifest is in place. A server that has a pruned file open keeps reading it.
        for old in all where !retained.contains(old) {
            try? fm.removeItem(at: recordURL(dataset: dataset, version: old))
            try? fm.removeItem(at: snapshotURL(dataset: dataset, version: old))
            try? fm.removeItem(at: gzipURL(dataset: dataset, version: old))
        }
        // The files of an earlier scoped form of this dataset.
        pruneUnreferenced(dataset: dataset, keeping: [], removeVersions: false)
        return manifest
    }

    /// `12.sqlite`, `12.sqlite.gz`, `12.json` → 12.
    static func versionNumber(fileName: String) -> Int? {
        guard let dot = fileName.firstIndex(of: ".") else { return nil }
        let suffix = fileName[dot...]
        guard suffix == ".sqlite" || suffix == ".sqlite.gz" || suffix == ".json" else { return nil }
        return Int(fileName[..<dot]).flatMap { $0 >= 1 ? $0 : nil }
    }
}
