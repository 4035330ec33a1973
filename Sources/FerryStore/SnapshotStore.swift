import FerryCore
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Read access to published snapshots: all the server's catalog uses, so another backend (an S3-compatible
/// bucket, docs/deploy.md) is one new conforming type. Each method's contract:
/// - ``datasets()`` lists datasets that have a manifest, sorted by name; throws when the store cannot be listed
///   (a passing fault must never look like an empty store).
/// - ``manifestRevision(dataset:)`` is cheap and changes whenever the dataset's manifest is replaced (a file's
///   inode, size and mtime; a bucket object's ETag); nil when there is none. Readers poll it and reload on change.
/// - ``storedManifest(for:)`` returns the dataset's manifest (every scope's retained versions), or nil when the
///   dataset has never been published.
/// - ``files(of:in:)`` and ``patchURL(dataset:sha256:)`` name a retained version's, and a patch's, complete,
///   immutable local files: a file is only ever referenced by a manifest after it was fsynced and renamed into
///   place (a remote backend downloads an object into a local cache before it returns its path).
/// - ``manifestURL(dataset:)`` says where the manifest lives, for messages.
public protocol SnapshotStore: Sendable {
    func datasets() throws -> [String]
    func manifestRevision(dataset: String) -> StoreRevision?
    func storedManifest(for dataset: String) throws -> StoredManifest?
    func files(of record: VersionRecord, in manifest: StoredManifest) -> SnapshotFiles
    func patchURL(dataset: String, sha256: String) -> URL
    func manifestURL(dataset: String) -> URL
}

/// An opaque token that changes whenever a dataset's manifest is replaced
/// (``SnapshotStore/manifestRevision(dataset:)``).
public struct StoreRevision: Hashable, Sendable {
    public let value: String

    public init(_ value: String) { self.value = value }
}

/// Where one version's bytes live: the SQLite file and its gzip copy.
public struct SnapshotFiles: Sendable, Equatable {
    public var snapshot: URL
    public var gzip: URL

    public init(snapshot: URL, gzip: URL) {
        self.snapshot = snapshot
        self.gzip = gzip
    }
}

/// The file-system snapshot store. One layout for every dataset, scoped or not:
///
/// ```
/// STORE/DATASET/manifest.json               StoredManifest: per scope, the retained VersionRecords (replaced atomically)
/// STORE/DATASET/objects/<sha256>.sqlite     a snapshot, named by its checksum (immutable)
/// STORE/DATASET/objects/<sha256>.sqlite.gz  its gzip copy
/// STORE/DATASET/tmp/                        the publisher's temp area; anything here is garbage after a crash
/// STORE/DATASET/.lock                       held by the one publisher working on the dataset
/// ```
///
/// A store written before content addressing (`versions/N.sqlite`) is read as it is and migrated by the next
/// publish (`FileSnapshotStore+Legacy.swift`).
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
    public func manifestURL(dataset: String) -> URL {
        directory(dataset: dataset).appendingPathComponent("manifest.json")
    }
    public func temporaryDirectory(dataset: String) -> URL {
        directory(dataset: dataset).appendingPathComponent("tmp", isDirectory: true)
    }
    public func objectsDirectory(dataset: String) -> URL {
        directory(dataset: dataset).appendingPathComponent("objects", isDirectory: true)
    }
    public func objectURL(dataset: String, sha256: String) -> URL {
        objectsDirectory(dataset: dataset).appendingPathComponent("\(sha256).sqlite")
    }
    public func objectGzipURL(dataset: String, sha256: String) -> URL {
        objectsDirectory(dataset: dataset).appendingPathComponent("\(sha256).sqlite.gz")
    }
    /// The publisher's row index of an object (`<sha256>.rows`), kept while the object is a scope's current version.
    public func rowIndexURL(dataset: String, sha256: String) -> URL {
        objectsDirectory(dataset: dataset).appendingPathComponent("\(sha256).rows")
    }
    /// A patch object: a gzip-compressed changeset, named by the checksum of those bytes.
    public func patchURL(dataset: String, sha256: String) -> URL {
        objectsDirectory(dataset: dataset).appendingPathComponent("\(sha256).patch.gz")
    }

    /// The manifest file's device, inode, size and modification time: a rename gives a new inode, an edit a new
    /// size or mtime.
    public func manifestRevision(dataset: String) -> StoreRevision? {
        var info = stat()
        guard stat(manifestURL(dataset: dataset).path, &info) == 0 else { return nil }
        #if canImport(Darwin)
            let modified = info.st_mtimespec
        #else
            let modified = info.st_mtim
        #endif
        return StoreRevision("\(info.st_dev):\(info.st_ino):\(info.st_size):\(modified.tv_sec).\(modified.tv_nsec)")
    }

    public func datasets() throws -> [String] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: root.path)
        } catch {
            throw FerryError(.io, "cannot list the snapshot store: \(error.localizedDescription)", path: root.path)
        }
        return names.filter {
            DatasetName.isValid($0) && FileManager.default.fileExists(atPath: manifestURL(dataset: $0).path)
        }.sorted()
    }

    /// The schema lines of dataset `base` that have a manifest (`base.vN`, docs/schema-lines.md), by schema version
    /// ascending; empty for a dataset published from one template.
    public func lines(of base: String) throws -> [(name: String, schemaVersion: Int)] {
        // A store not made yet (a first publish makes it) has no lines.
        guard FileManager.default.fileExists(atPath: root.path) else { return [] }
        return try datasets().compactMap { name in
            guard let (lineBase, schemaVersion) = DatasetName.split(name), lineBase == base, let schemaVersion else {
                return nil
            }
            return (name, schemaVersion)
        }.sorted { $0.schemaVersion < $1.schemaVersion }
    }

    /// Marks schema line `line` retired (its manifest's `retiredAt`), atomically; its files stay, so the line's
    /// template can come back. Returns false when it was retired already. Call it while holding the dataset's lock.
    @discardableResult
    public func retire(line: String, at timestamp: String) throws -> Bool {
        guard var manifest = try storedManifest(for: line), manifest.retiredAt == nil else { return false }
        manifest.retiredAt = timestamp
        try manifest.validate()
        try DurableFile.write(try manifest.jsonData(), to: manifestURL(dataset: line))
        return true
    }

    /// `manifest.json`, validated; nil when the dataset has never been published. A legacy manifest is converted.
    public func storedManifest(for dataset: String) throws -> StoredManifest? {
        guard DatasetName.isValid(dataset) else { return nil }
        let url = manifestURL(dataset: dataset)
        guard let data = FileManager.default.contents(atPath: url.path) else { return nil }
        // The common case first; only a document that is not a current manifest is looked at as a legacy one (a plain
        // Manifest, without `scopes`): parsing every manifest twice cost a publish as much as decoding it.
        do {
            return try StoredManifest.decode(data, path: url.path)
        } catch {
            guard Self.isLegacyManifest(data) else { throw error }
            return try legacyManifest(dataset: dataset, data: data)
        }
    }

    public func files(of record: VersionRecord, in manifest: StoredManifest) -> SnapshotFiles {
        if manifest.isLegacyLayout { return legacyFiles(dataset: manifest.dataset, version: record.version) }
        return SnapshotFiles(
            snapshot: objectURL(dataset: manifest.dataset, sha256: record.sha256),
            gzip: objectGzipURL(dataset: manifest.dataset, sha256: record.sha256))
    }

    /// The client's manifest of an unscoped dataset; nil when never published or scoped.
    public func manifest(for dataset: String) throws -> Manifest? {
        guard let stored = try storedManifest(for: dataset), !stored.scoped else { return nil }
        return stored.entry(for: nil)?.manifest(dataset: dataset)
    }

    /// Retained version `version` of a scope (nil: the implicit scope), or nil when not retained.
    public func record(dataset: String, version: Int, scope: String? = nil) throws -> VersionRecord? {
        try storedManifest(for: dataset)?.entry(for: scope)?.record(version: version)
    }

    /// The files of retained version `version` of a scope (nil: the implicit scope), or nil when not retained.
    public func files(dataset: String, version: Int, scope: String? = nil) throws -> SnapshotFiles? {
        guard let manifest = try storedManifest(for: dataset),
            let record = manifest.entry(for: scope)?.record(version: version)
        else { return nil }
        return files(of: record, in: manifest)
    }

    /// The number the next version gets: one more than any the dataset has given, so a number, and so an immutable
    /// URL, is never reused.
    public func nextVersion(dataset: String) throws -> Int {
        (try storedManifest(for: dataset)?.lastVersion ?? 0) + 1
    }

    /// Takes the dataset's publisher lock. With `wait: false`, fails at once if another publisher holds it.
    public func lock(dataset: String, wait: Bool) throws -> FileLock {
        try DurableFile.makeDirectory(directory(dataset: dataset))
        return try FileLock(path: directory(dataset: dataset).appendingPathComponent(".lock").path, wait: wait)
    }

    /// Brings the dataset to the current layout (migrating a legacy store) and removes what a crashed publisher left
    /// behind: everything in `tmp/` and objects no retained version names. Call it while holding the lock.
    /// Returns the number of files removed.
    @discardableResult
    public func cleanLeftovers(dataset: String) throws -> Int {
        try cleanLeftoversReading(dataset: dataset).removed
    }

    /// ``cleanLeftovers(dataset:)``, returning the manifest it read too (nil: never published), so that a publish
    /// reads it once.
    public func cleanLeftoversReading(dataset: String) throws -> (removed: Int, manifest: StoredManifest?) {
        let manifest = try migrateLegacyLayout(dataset: dataset, manifest: storedManifest(for: dataset))
        var removed = try clearTemporaryDirectory(dataset: dataset)
        removed += try removeUnreferencedObjects(dataset: dataset, keeping: manifest?.referencedObjects ?? [])
        return (removed, manifest)
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
        try DurableFile.makeDirectory(objectsDirectory(dataset: dataset))
        try DurableFile.sync(file)
        let sha256 = try FileDigest.sha256Hex(of: file)
        let size = try Self.fileSize(file)
        let target = objectURL(dataset: dataset, sha256: sha256)
        let gzipTarget = objectGzipURL(dataset: dataset, sha256: sha256)
        if FileManager.default.fileExists(atPath: target.path), FileManager.default.fileExists(atPath: gzipTarget.path)
        {
            try DurableFile.remove(file)
            return StoredObject(sha256: sha256, size: size, gzipSize: try Self.fileSize(gzipTarget))
        }
        let gzipTemp = file.appendingPathExtension("gz")
        let gzipSize = try Gzip.compressFile(from: file, to: gzipTemp, level: gzipLevel)
        try DurableFile.rename(gzipTemp, to: gzipTarget)
        try DurableFile.rename(file, to: target)
        return StoredObject(sha256: sha256, size: size, gzipSize: gzipSize)
    }

    /// A finished snapshot file in the dataset's temp directory, fsynced, hashed and gzipped next to itself
    /// (`file.gz`, fsynced), ready for ``storeObject(dataset:prepared:)``. Preparing needs no lock and no store, so
    /// it can run while the file is still being verified; nothing is stored until the caller decides to.
    public struct PreparedObject: Sendable, Equatable {
        public var file: URL
        public var gzipFile: URL
        public var sha256: String
        public var size: Int64
        public var gzipSize: Int64

        /// Fsyncs `file` while reading it once, hashing it and gzipping it (deflated by `encoding`) in the same pass,
        /// the deflating spread over the cores as one gzip member
        /// (``Gzip/compressAndHashParallel(from:to:encoding:threads:chunkSize:)``).
        ///
        /// ```swift
        /// let prepared = try FileSnapshotStore.PreparedObject(file: tmpFile, encoding: .zlib(level: 1))
        /// let stored = try store.storeObject(dataset: "trips", prepared: prepared)
        /// ```
        public init(file: URL, encoding: Gzip.ChunkEncoding) throws {
            self.file = file
            gzipFile = file.appendingPathExtension("gz")
            // The file's fsync (disk-bound) runs beside the gzip copy (CPU-bound); both finish before anything is
            // renamed into the store.
            let sync = ThreadJob(name: "ferry.fsync") { try DurableFile.sync(file) }
            let compressed: Gzip.Compressed
            do {
                compressed = try Gzip.compressAndHashParallel(from: file, to: gzipFile, encoding: encoding)
            } catch {
                _ = try? sync.join()  // the gzip copy's error is the one to report; the file is not stored
                throw error
            }
            try sync.join()
            sha256 = compressed.sha256
            size = compressed.size
            gzipSize = compressed.gzipSize
        }

        /// Deletes both temp files (the data was not stored after all).
        public func discard() throws {
            try DurableFile.remove(gzipFile)
            try DurableFile.remove(file)
        }
    }

    /// Moves a prepared file and its gzip copy into `objects/` under its checksum; when that object exists, the
    /// file is identical to it and both temp files are deleted. Call it while holding the lock.
    public func storeObject(dataset: String, prepared: PreparedObject) throws -> StoredObject {
        try DurableFile.makeDirectory(objectsDirectory(dataset: dataset))
        let target = objectURL(dataset: dataset, sha256: prepared.sha256)
        let gzipTarget = objectGzipURL(dataset: dataset, sha256: prepared.sha256)
        if FileManager.default.fileExists(atPath: target.path), FileManager.default.fileExists(atPath: gzipTarget.path)
        {
            try prepared.discard()
            return StoredObject(sha256: prepared.sha256, size: prepared.size, gzipSize: try Self.fileSize(gzipTarget))
        }
        try DurableFile.rename(prepared.gzipFile, to: gzipTarget)
        try DurableFile.rename(prepared.file, to: target)
        return StoredObject(sha256: prepared.sha256, size: prepared.size, gzipSize: prepared.gzipSize)
    }

    /// Replaces `manifest.json` with `manifest` atomically, then deletes the objects no retained version names any
    /// more (of dropped versions and scopes). A server holding a deleted file open keeps reading it. Call it while
    /// holding the lock, after every object the manifest names was stored.
    public func commit(_ manifest: StoredManifest) throws {
        try manifest.validate()
        let dataset = manifest.dataset
        for record in manifest.scopes.flatMap(\.chain) {
            if let step = record.step,
                !FileManager.default.fileExists(atPath: patchURL(dataset: dataset, sha256: step.sha256).path)
            {
                throw FerryError(
                    .store, "refusing to write a manifest naming a missing step \(step.sha256)",
                    path: objectsDirectory(dataset: dataset).path)
            }
            if record.isCheckpoint,
                !FileManager.default.fileExists(atPath: objectURL(dataset: dataset, sha256: record.sha256).path)
            {
                throw FerryError(
                    .store, "refusing to write a manifest naming a missing snapshot \(record.sha256)",
                    path: objectsDirectory(dataset: dataset).path)
            }
            for patch in record.patches ?? []
            where !FileManager.default.fileExists(atPath: patchURL(dataset: dataset, sha256: patch.sha256).path) {
                throw FerryError(
                    .store, "refusing to write a manifest naming a missing patch \(patch.sha256)",
                    path: objectsDirectory(dataset: dataset).path)
            }
        }
        try DurableFile.write(try manifest.jsonData(), to: manifestURL(dataset: dataset))
        try removeUnreferencedObjects(
            dataset: dataset, keeping: manifest.referencedObjects, current: Set(manifest.scopes.map(\.current.sha256)))
    }

    /// Publishes one finished SQLite file as `version` of an unscoped dataset: stores the object, adds its record to
    /// the implicit scope's retained versions (keeping the newest `keep`) and commits the manifest. Call it while
    /// holding the lock. The publisher builds manifests itself; this is for tools and tests that have a file.
    public func commit(
        dataset: String, version: Int, snapshot: URL, schemaVersion: Int, tables: [String: Int], dataDigest: String,
        createdAt: String, keep: Int, gzipLevel: Int32 = 6
    ) throws -> Manifest {
        precondition(keep >= 1, "keep must be at least 1")
        let object = try storeObject(dataset: dataset, file: snapshot, gzipLevel: gzipLevel)
        let record = VersionRecord(
            published: PublishedVersion(
                version: version, sha256: object.sha256, size: object.size, gzipSize: object.gzipSize,
                createdAt: createdAt,
                schemaVersion: schemaVersion, tables: tables),
            dataDigest: dataDigest)
        let previous = try storedManifest(for: dataset)
        let before = previous.flatMap { $0.scoped ? nil : $0.entry(for: nil)?.retained } ?? []
        let entry = ScopeEntry(scope: nil, retained: Array((before + [record]).suffix(keep)))
        try commit(
            StoredManifest(
                dataset: dataset, scoped: false, schemaVersion: schemaVersion,
                lastVersion: max(version, previous?.lastVersion ?? 0),
                createdAt: createdAt, scopes: [entry]))
        return entry.manifest(dataset: dataset)
    }

    /// Empties the dataset's `tmp/`, the publisher's work area. Returns the number of entries removed.
    @discardableResult
    public func clearTemporaryDirectory(dataset: String) throws -> Int {
        try removeContents(of: temporaryDirectory(dataset: dataset)) { _ in true }
    }

    /// Deletes object files whose checksum is not in `keeping`, and row indexes of objects not in `current` (only a
    /// scope's current version is built on). Returns the count.
    @discardableResult
    func removeUnreferencedObjects(dataset: String, keeping: Set<String>, current: Set<String>? = nil) throws -> Int {
        try removeContents(of: objectsDirectory(dataset: dataset)) { name in
            let sha = name.split(separator: ".").first.map(String.init) ?? ""
            // A dot file is an interrupted copy (`.<sha256>.sqlite.tmp`).
            if name.hasPrefix(".") || !keeping.contains(sha) { return true }
            return name.hasSuffix(".rows") && !(current ?? keeping).contains(sha)
        }
    }

    /// Deletes the entries of `directory` that `shouldRemove` picks; a missing directory has none.
    func removeContents(of directory: URL, where shouldRemove: (String) -> Bool) throws -> Int {
        guard FileManager.default.fileExists(atPath: directory.path) else { return 0 }
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        } catch {
            throw FerryError(
                .io, "cannot list \(directory.lastPathComponent)/: \(error.localizedDescription)", path: directory.path)
        }
        var removed = 0
        for name in names where shouldRemove(name) {
            try DurableFile.remove(directory.appendingPathComponent(name))
            removed += 1
        }
        return removed
    }

    /// The size of `url` in bytes; an error names the file.
    public static func fileSize(_ url: URL) throws -> Int64 {
        do {
            guard let size = try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber else {
                throw FerryError(.io, "the file system reported no size", path: url.path)
            }
            return size.int64Value
        } catch let error as FerryError {
            throw error
        } catch {
            throw FerryError(.io, "cannot read the file's size: \(error.localizedDescription)", path: url.path)
        }
    }
}
