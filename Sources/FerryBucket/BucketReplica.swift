import FerryCore
import FerryS3
import FerryStore
import Foundation
import Logging
import NIOPosix
import ServiceLifecycle

/// Keeps a ``BucketSnapshotStore`` in step with its bucket, for `ferry serve --store s3://BUCKET/PREFIX`: every
/// poll it lists the datasets (`PREFIX/DATASET/manifest.json`) and reads each manifest with `If-None-Match` on the
/// served ETag (an unchanged manifest costs a 304). A new manifest's objects that the cache lacks are downloaded
/// (a few in parallel), each streamed to a temp file, verified (a snapshot and a patch by the SHA-256 that names
/// them, a gzip copy by the size its record gives), fsynced and renamed into the cache; only then is the manifest
/// served. A manifest that does not validate or names an object that fails verification is not served: the previous
/// state stays, the error is logged naming the key, and the next poll tries again. A bucket that cannot be read
/// (deleted, unreachable, credentials revoked) leaves the last good state served until it is back.
///
/// Cached files no served manifest names are deleted one poll after they stopped being named (the catalog, which
/// polls at most every second, has moved on by then; a download in flight keeps its open file).
///
/// ```swift
/// let replica = try BucketReplica.fromEnvironment(location: location, endpoint: nil, cacheParent: nil,
///                                                pollInterval: .seconds(2), logger: logger)
/// try await replica.start()          // the first sync: throws on an unknown bucket or wrong credentials
/// configuration.dependencies.store = replica.store
/// ```
public final class BucketReplica: Service, Sendable {
    public let store: BucketSnapshotStore
    let s3: S3Client
    let pollInterval: Duration
    /// Downloads running at once during one sync.
    let parallelDownloads: Int
    let logger: Logger
    /// Cached files unreferenced at the previous sync (deleted at this one if still unreferenced).
    let unreferenced = Locked<Set<String>>([])
    /// The last error logged per key, so a failure that persists is logged once, not every poll.
    let reported = Locked<[String: String]>([:])

    var layout: BucketLayout { store.layout }

    /// A replica of `location` whose cache is a fresh directory under `cacheParent` (default: the system's temp
    /// directory), removed when the replica stops (``run()``) or with ``removeCache()``.
    public init(
        s3: S3Client, location: S3Location, cacheParent: URL? = nil, pollInterval: Duration = .seconds(2),
        parallelDownloads: Int = 4, logger: Logger
    ) throws {
        let parent = cacheParent ?? FileManager.default.temporaryDirectory
        let cache = parent.appendingPathComponent("ferry-bucket-cache-\(UUID().uuidString)", isDirectory: true)
        try DurableFile.makeDirectory(cache)
        self.store = BucketSnapshotStore(layout: BucketLayout(location: location), cacheDirectory: cache)
        self.s3 = s3
        self.pollInterval = pollInterval
        self.parallelDownloads = max(1, parallelDownloads)
        self.logger = logger
    }

    /// A replica of the bucket of `location` (which must be `.bucket`), with the credentials and region of the AWS
    /// variables and the endpoint `endpoint`, else `AWS_ENDPOINT_URL` (``S3Configuration/fromEnvironment(_:endpoint:)``).
    public static func fromEnvironment(
        location: StoreLocation, endpoint: String?, cacheParent: URL?, pollInterval: Duration, logger: Logger
    ) throws -> BucketReplica {
        guard case .bucket(let bucket) = location else {
            throw FerryError(.badInput, "--store \(location): a bucket replica needs an s3://BUCKET/PREFIX store")
        }
        let configuration = try S3Configuration.fromEnvironment(endpoint: endpoint)
        return try BucketReplica(
            s3: S3Client(configuration: configuration), location: bucket, cacheParent: cacheParent,
            pollInterval: pollInterval, logger: logger)
    }

    /// A presigned URL of object `object` (its name in `objects/`, e.g. `<sha256>.sqlite.gz`) of `dataset` in the
    /// bucket, valid for `expires` seconds: what the object lookup hands a cache with `ferry serve
    /// --presign-objects`, so the cache fills from the bucket with no credentials of its own (deploy/nginx/ferry.conf).
    public func objectURL(dataset: String, object: String, expires: Int = BucketReplica.objectURLLifetime) -> String {
        s3.presignedGetURL(
            bucket: layout.bucket, key: layout.objectKey(dataset: dataset, name: object), expires: expires)
    }

    /// The bucket's attachments (`DATASET/attachments/` under the prefix), cached beside the replica's objects
    /// (`CACHE/DATASET/attachments/`, which the replica's clean-up of unreferenced objects never touches).
    public var attachments: BucketAttachmentStore {
        BucketAttachmentStore(s3: s3, layout: layout, cache: store.cacheDirectory)
    }

    /// How long a presigned object URL is valid: 1 hour, the default `--object-grace`, so an object that a URL
    /// names outlives it, and long enough for a cache to fetch every slice of a large object from one lookup.
    public static let objectURLLifetime = 3600

    /// The first sync: lists the bucket and downloads what its manifests name. Throws when the bucket cannot be
    /// listed (unknown bucket, wrong credentials, unreachable endpoint), with the message naming the setting; a
    /// dataset whose manifest or objects fail is logged and left out, like on every later poll.
    public func start() async throws {
        try await sync()
    }

    /// Syncs every ``pollInterval`` until graceful shutdown, then removes the cache.
    public func run() async throws {
        defer { removeCache() }
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            // A cancelled sleep is the shutdown: stop polling.
            guard (try? await cancelWhenGracefulShutdown({ try await Task.sleep(for: self.pollInterval) })) != nil
            else { break }
            await poll()
        }
    }

    /// One sync; a bucket that cannot be listed is reported once and the last good state stays served.
    func poll() async {
        do {
            try await sync()
            if reported.withLock({ $0.removeValue(forKey: "bucket") }) != nil {
                logger.notice("the bucket s3://\(layout.bucket) is readable again", metadata: metadata)
            }
        } catch {
            report("bucket", "cannot list \(layout.location): \(error); serving the last good state")
        }
    }

    /// Deletes the cache directory (the process is done with it).
    public func removeCache() {
        // Best effort: a temp directory left behind is the system's to clean, and stopping must not fail over it.
        try? FileManager.default.removeItem(at: store.cacheDirectory)  // a temp dir: the OS cleans what is left
    }

    var metadata: Logger.Metadata { ["store": .string(layout.location.description)] }

    /// Logs `message` at error level unless it is what was last logged for `key`.
    func report(_ key: String, _ message: String) {
        let isNew = reported.withLock { reported in
            defer { reported[key] = message }
            return reported[key] != message
        }
        if isNew { logger.error("\(message)", metadata: metadata) }
    }

    // MARK: One poll

    /// Lists the datasets, brings each up to date, then deletes the cached files no served manifest has named for
    /// a whole poll. Throws only when the bucket cannot be listed.
    func sync() async throws {
        let datasets = try await listDatasets()
        for dataset in datasets {
            let key = layout.manifestKey(dataset: dataset)
            do {
                try await sync(dataset: dataset)
                if reported.withLock({ $0.removeValue(forKey: key) }) != nil {
                    logger.notice("s3://\(layout.bucket)/\(key) is served again", metadata: metadata)
                }
            } catch {
                report(
                    key,
                    "s3://\(layout.bucket)/\(key) is not served (the previous state of \(dataset) is): \(error)")
            }
        }
        // A served dataset whose manifest vanished from the listing keeps being served: a publisher never deletes a
        // manifest, so this is a bucket being emptied or replaced, and the last good state is what devices need.
        try await NIOThreadPool.singleton.runIfActive { self.removeUnreferencedFiles() }
    }

    /// The datasets of the store (`PREFIX/DATASET/`), sorted: one listing with a delimiter, so a poll costs one
    /// entry per dataset, not one per object. A dataset whose manifest is not there yet (its first publish is
    /// uploading objects) is skipped by ``sync(dataset:)``.
    func listDatasets() async throws -> [String] {
        let prefix = layout.storePrefix
        let prefixes = try await s3.listPrefixes(bucket: layout.bucket, prefix: prefix)
        return prefixes.compactMap { entry -> String? in
            guard entry.hasPrefix(prefix), entry.hasSuffix("/") else { return nil }
            let name = String(entry.dropFirst(prefix.count).dropLast())
            return DatasetName.isValid(name) ? name : nil
        }.sorted()
    }

    /// Reads the dataset's manifest unless its served ETag still matches; on a new one, downloads and verifies what
    /// the cache lacks, then serves it.
    func sync(dataset: String) async throws {
        let key = layout.manifestKey(dataset: dataset)
        let served = store.etags()[dataset]
        guard let answer = try await s3.getIfPresent(bucket: layout.bucket, key: key, ifNoneMatch: served) else {
            // No manifest: a first publish still uploading its objects (a served one is never deleted; see sync()).
            return
        }
        guard case .object(let object) = answer else { return }
        let etag = object.etag ?? FileDigest.sha256Hex(bytes: [UInt8](object.body))
        if etag == served { return }
        let manifest = try StoredManifest.decode(object.body, path: "s3://\(layout.bucket)/\(key)")
        guard manifest.dataset == dataset else {
            throw FerryError(
                .store, "the manifest names dataset '\(manifest.dataset)', not '\(dataset)'",
                path: "s3://\(layout.bucket)/\(key)", key: "dataset")
        }
        let needed = BucketSnapshotStore.objectNames(of: manifest)
        let missing = try await NIOThreadPool.singleton.runIfActive { [store] in
            needed.filter {
                !FileManager.default.fileExists(atPath: store.objectURL(dataset: dataset, name: $0.name).path)
            }
        }
        try await download(missing, dataset: dataset)
        store.expose(dataset: dataset, etag: etag, manifest: manifest)
        logger.info(
            "serving \(dataset) from s3://\(layout.bucket)/\(key)",
            metadata: metadata.merging(
                [
                    "etag": .string(etag), "downloaded": "\(missing.count)",
                    "versions": .string(manifest.scopes.map { String($0.current.version) }.joined(separator: ",")),
                ], uniquingKeysWith: { $1 }))
    }

    /// Downloads `objects`, at most ``parallelDownloads`` at once; the first failure cancels the rest and throws.
    func download(_ objects: [BucketSnapshotStore.NeededObject], dataset: String) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            var running = 0
            for object in objects {
                if running == parallelDownloads {
                    _ = try await group.next()
                    running -= 1
                }
                group.addTask { try await self.download(object, dataset: dataset) }
                running += 1
            }
            try await group.waitForAll()
        }
    }

    /// Streams one object to a temp file (fsynced by ``S3Client/download(bucket:key:to:)``), verifies it and renames
    /// it into the cache. The file work (the temp directory, the rename, removing a failed download) runs on
    /// `NIOThreadPool.singleton`, the server's lane for short blocking file work; the download writes there too.
    func download(_ object: BucketSnapshotStore.NeededObject, dataset: String) async throws {
        let key = layout.objectKey(dataset: dataset, name: object.name)
        let temporary = store.cacheDirectory.appendingPathComponent(".tmp", isDirectory: true)
        let file = temporary.appendingPathComponent("\(UUID().uuidString)-\(object.name)")
        let target = store.objectURL(dataset: dataset, name: object.name)
        do {
            try await NIOThreadPool.singleton.runIfActive { try DurableFile.makeDirectory(temporary) }
            let got = try await s3.download(bucket: layout.bucket, key: key, to: file)
            try verify(got, of: object, key: key)
            try await NIOThreadPool.singleton.runIfActive {
                try DurableFile.makeDirectory(target.deletingLastPathComponent())
                try DurableFile.rename(file, to: target)
            }
        } catch {
            // The download's error is the one to report; the temp file is garbage (the next sync's download of
            // the same object uses a new name, and the cache is removed when the replica stops).
            _ = try? await NIOThreadPool.singleton.runIfActive { try DurableFile.remove(file) }
            throw error
        }
    }

    /// Checks a download against the manifest: the SHA-256 that names a snapshot or patch, the size of every object.
    func verify(_ got: S3Download, of object: BucketSnapshotStore.NeededObject, key: String) throws {
        if let sha256 = object.sha256, got.sha256 != sha256 {
            throw FerryError(
                .verification,
                "s3://\(layout.bucket)/\(key): the object's SHA-256 is \(got.sha256), not the \(sha256) its name "
                    + "and the manifest give; republish the dataset")
        }
        if got.size != object.size {
            throw FerryError(
                .verification,
                "s3://\(layout.bucket)/\(key): the object has \(got.size) bytes, not the \(object.size) the "
                    + "manifest gives; republish the dataset")
        }
    }

    /// Deletes cached files that no served manifest named at the previous sync nor names now. Blocking (it lists
    /// and removes files): ``sync()`` runs it on `NIOThreadPool.singleton`.
    func removeUnreferencedFiles() {
        let referenced = store.referencedFiles()
        var found: Set<String> = []
        let root = store.cacheDirectory
        // An unreadable cache directory has nothing to remove; the downloads into it report their own errors.
        let datasets = (try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []
        for dataset in datasets where DatasetName.isValid(dataset) {
            let objects = root.appendingPathComponent(dataset).appendingPathComponent("objects")
            for name in (try? FileManager.default.contentsOfDirectory(atPath: objects.path)) ?? [] {  // as above
                found.insert("\(dataset)/objects/\(name)")
            }
        }
        let garbage = found.subtracting(referenced)
        let due = unreferenced.withLock { previous in
            defer { previous = garbage }
            return garbage.intersection(previous)
        }
        for relative in due.sorted() {
            do {
                try DurableFile.remove(root.appendingPathComponent(relative))
            } catch {
                logger.warning("cannot remove a cached object no manifest names: \(error)", metadata: metadata)
            }
        }
        if !due.isEmpty {
            logger.debug("removed \(due.count) cached objects no manifest names any more", metadata: metadata)
        }
    }
}
