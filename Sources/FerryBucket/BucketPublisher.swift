import FerryCore
import FerryPostgres
import FerryPublisher
import FerryS3
import FerryStore
import Foundation
import Logging

/// Publishes a dataset into a store in a bucket (`ferry publish --store s3://BUCKET/PREFIX`, docs/s3.md).
///
/// The ``Publisher`` publishes into a local ``FileSnapshotStore`` as always, which serves as a cache of the bucket;
/// this wraps it:
/// 1. read `DATASET/manifest.json` from the bucket and remember its ETag (or that there is none);
/// 2. bring the cache in line: the bucket's manifest replaces the cache's, and each scope's current file (checked
///    against its SHA-256), row index and patches are downloaded when the cache lacks them, so an empty disk builds
///    incrementally;
/// 3. run the publisher into the cache;
/// 4. upload every object the new manifest names that the bucket lacks (large files as multipart uploads);
/// 5. write the manifest last, conditionally (`If-Match` the ETag of step 1, or `If-None-Match: *`): a lost
///    condition means another publisher won, and this one fails with "another publisher changed DATASET; nothing
///    was published";
/// 6. delete the objects no retained version and no patch names once they have been unreferenced for the grace
///    period, and abort multipart uploads older than it.
///
/// ```swift
/// var configuration = Publisher.Configuration(templatePath: "t.yml", databaseURL: url, store: cacheDirectory)
/// let publisher = BucketPublisher(
///     configuration: configuration, s3: S3Client(configuration: try .fromEnvironment()),
///     layout: BucketLayout(location: try S3Location(parsing: "s3://ferry-store/prod")), objectGrace: .seconds(3600))
/// let result = try await publisher.publish(changedTables: nil)
/// ```
public struct BucketPublisher: Publishing {
    /// The publish; its `store` is the local cache directory.
    public let configuration: Publisher.Configuration
    public let s3: S3Client
    public let layout: BucketLayout
    /// How long an object stays in the bucket after it stopped being referenced. Default 1 h.
    public let objectGrace: Duration
    /// Files larger than this go up as multipart uploads. Default 32 MiB.
    public var multipartThreshold: Int64 = 32 << 20
    /// The size of one part of a multipart upload. Default 8 MiB.
    public var partSize: Int = 8 << 20
    /// Parts uploaded at once; memory holds at most this many parts. Default 4.
    public var partsInFlight: Int = 4
    /// Test hook: runs after the objects are uploaded, just before the manifest is written.
    var beforeManifestWrite: (@Sendable () async throws -> Void)?
    /// Test hook: called with an object's name each time a cached file is hashed (``CachedDigests``).
    var hashed: (@Sendable (String) -> Void)?
    let logger: Logger

    public init(
        configuration: Publisher.Configuration, s3: S3Client, layout: BucketLayout,
        objectGrace: Duration = .seconds(3600), logger: Logger = Logger(label: "ferry.publish")
    ) {
        var configuration = configuration
        configuration.storeIsCache = true
        self.configuration = configuration
        self.s3 = s3
        self.layout = layout
        self.objectGrace = objectGrace
        self.logger = logger
    }

    /// The key of the list of unreferenced objects and when each was first seen unreferenced.
    public func unreferencedKey(dataset: String) -> String { layout.datasetPrefix(dataset) + "unreferenced.json" }

    /// Publishes once into the bucket (steps 1–6 above) and returns the publish's result, with what moved as its
    /// ``PublishResult/bucket`` (``BucketTransfer``, key `bucket` of `publish --json`).
    public func publish(changedTables: Set<String>?) async throws -> PublishResult {
        let templatePath = configuration.templatePath
        let dataset = try await ThreadJob.run(name: Self.lane) { try Template.load(path: templatePath).dataset }
        let cache = FileSnapshotStore(root: configuration.store)
        var transfer = BucketTransfer()

        // 1. The bucket's manifest and its ETag.
        let remote = try await readManifest(dataset: dataset)

        // 2. The cache in line with the bucket.
        let syncStarted = ContinuousClock.now
        let digests = try await syncCache(dataset: dataset, remote: remote?.manifest, cache: cache, transfer: &transfer)
        transfer.downloadSeconds = (ContinuousClock.now - syncStarted).inSeconds

        // 3. The normal publish, into the cache.
        var result = try await Publisher(configuration: configuration, logger: logger).publish(
            changedTables: changedTables)
        let stored = try await ThreadJob.run(name: Self.lane) { try cache.storedManifest(for: dataset) }
        guard let manifest = stored else {
            throw FerryError(
                .store, "the publish left no manifest in the cache", path: cache.manifestURL(dataset: dataset).path)
        }
        let listed = try await s3.list(bucket: layout.bucket, prefix: layout.objectsPrefix(dataset: dataset))
        let prefix = layout.objectsPrefix(dataset: dataset)
        var inBucket = Set(listed.map { String($0.key.dropFirst(prefix.count)) })

        if manifest != remote?.manifest {
            // 4. Objects first.
            let uploadStarted = ContinuousClock.now
            try await uploadObjects(
                of: manifest, cache: cache, inBucket: &inBucket, transfer: &transfer)
            transfer.uploadSeconds = (ContinuousClock.now - uploadStarted).inSeconds
            // 5. The manifest last, only over the one read in step 1.
            try await beforeManifestWrite?()
            do {
                try await s3.put(
                    bucket: layout.bucket, key: layout.manifestKey(dataset: dataset), body: try manifest.jsonData(),
                    condition: remote.map { S3WriteCondition.ifMatch($0.etag) } ?? .ifNoneMatchAny,
                    contentType: "application/json")
            } catch let error as FerryError where error.code == .s3PreconditionFailed {
                throw FerryError(.store, "another publisher changed \(dataset); nothing was published")
            }
        }

        // 6. Retention, with a grace period.
        try await retain(dataset: dataset, manifest: manifest, inBucket: inBucket, transfer: &transfer)
        try await pruneCache(dataset: dataset, manifest: manifest, cache: cache, digests: digests)
        for note in transfer.notes { logger.notice("\(note)", metadata: ["dataset": "\(dataset)"]) }
        result.bucket = transfer
        return result
    }

    /// The name of the publish lane's threads (`ThreadJob.run`): every blocking step of a bucket publish (reading
    /// the template and manifests, hashing, reading files to upload, fsync, rename, pruning) runs there, off the
    /// cooperative pool, on a thread of its own, as the publish itself does (docs/ARCHITECTURE.md, "Concurrency").
    static let lane = "ferry-bucket-publish"

    // MARK: 1–2: reading the bucket into the cache

    struct RemoteManifest {
        var manifest: StoredManifest
        var etag: String
    }

    func readManifest(dataset: String) async throws -> RemoteManifest? {
        let key = layout.manifestKey(dataset: dataset)
        let object: S3Object
        do {
            guard case .object(let read) = try await s3.get(bucket: layout.bucket, key: key) else { return nil }
            object = read
        } catch let error as FerryError where (error.underlying as? S3ErrorResponse)?.code == "NoSuchKey" {
            return nil
        }
        guard let etag = object.etag, !etag.isEmpty else {
            throw FerryError(
                .network,
                "GET s3://\(layout.bucket)/\(key): the server sent no ETag, so the manifest cannot be "
                    + "replaced conditionally")
        }
        return RemoteManifest(
            manifest: try StoredManifest.decode(object.body, path: "s3://\(layout.bucket)/\(key)"), etag: etag)
    }

    // MARK: 4: uploading

    /// The object names (in `objects/`) a manifest needs in the bucket: every retained checkpoint's file and gzip
    /// copy, every other version's step, every version's patches, and each current version's row index (optional: the next cold publisher builds on it).
    static func names(of manifest: StoredManifest) -> (required: Set<String>, rowIndexes: Set<String>) {
        var required: Set<String> = []
        for record in manifest.scopes.flatMap(\.chain) {
            if record.isCheckpoint {
                required.insert("\(record.sha256).sqlite")
                required.insert("\(record.sha256).sqlite.gz")
            }
            if let step = record.step { required.insert("\(step.sha256).patch.gz") }
            for patch in record.patches ?? [] { required.insert("\(patch.sha256).patch.gz") }
        }
        return (required, Set(manifest.scopes.filter(\.current.isCheckpoint).map { "\($0.current.sha256).rows" }))
    }

    func uploadObjects(
        of manifest: StoredManifest, cache: FileSnapshotStore, inBucket: inout Set<String>,
        transfer: inout BucketTransfer
    ) async throws {
        let dataset = manifest.dataset
        let (required, rowIndexes) = Self.names(of: manifest)
        for name in required.union(rowIndexes).sorted() {
            if inBucket.contains(name) {
                transfer.skipped += 1
                continue
            }
            let file = cache.objectsDirectory(dataset: dataset).appendingPathComponent(name)
            let threshold = multipartThreshold
            // The size, and the whole file when it goes up in one PUT (at most `multipartThreshold` bytes).
            let local = try await ThreadJob.run(name: Self.lane) { () -> (size: Int64, body: Data?)? in
                guard FileManager.default.fileExists(atPath: file.path) else { return nil }
                let size = try BucketUpload.size(of: file)
                return (size, size > threshold ? nil : try BucketUpload.read(file))
            }
            guard let local else {
                if rowIndexes.contains(name) && !required.contains(name) {
                    transfer.notes.append("no row index \(name) to upload; the next cold publisher builds from scratch")
                    continue
                }
                throw FerryError(
                    .store,
                    "the manifest of \(dataset) names \(name), which is in neither the bucket "
                        + "(s3://\(layout.bucket)/\(layout.objectsPrefix(dataset: dataset))) nor the cache: publish with --full",
                    path: file.path)
            }
            let key = layout.objectKey(dataset: dataset, name: name)
            let size = local.size
            if let body = local.body {
                do {
                    try await s3.put(bucket: layout.bucket, key: key, body: body, condition: .ifNoneMatchAny)
                } catch let error as FerryError where error.code == .s3PreconditionFailed {
                    // Content-addressed: an object with this name already has these bytes.
                    transfer.skipped += 1
                    inBucket.insert(name)
                    continue
                }
            } else {
                try await BucketUpload.multipart(
                    s3: s3, bucket: layout.bucket, key: key, file: file, size: size, partSize: partSize,
                    inFlight: partsInFlight)
            }
            inBucket.insert(name)
            transfer.uploaded += 1
            transfer.uploadedBytes += size
        }
    }

    // MARK: 6: retention

    func retain(dataset: String, manifest: StoredManifest, inBucket: Set<String>, transfer: inout BucketTransfer)
        async throws
    {
        let referenced = manifest.referencedObjects
        let current = Set(manifest.scopes.map(\.current.sha256))
        let unreferenced = inBucket.filter { name in
            let sha = name.split(separator: ".").first.map(String.init) ?? ""
            return !referenced.contains(sha) || (name.hasSuffix(".rows") && !current.contains(sha))
        }
        let listKey = unreferencedKey(dataset: dataset)
        let now = Date()
        var seen: [String: String] = [:]
        do {
            if case .object(let object) = try await s3.get(bucket: layout.bucket, key: listKey) {
                // An unreadable list restarts every grace period: objects are kept longer, never deleted early.
                seen = (try? JSONDecoder().decode([String: String].self, from: object.body)) ?? [:]
            }
        } catch let error as FerryError where (error.underlying as? S3ErrorResponse)?.code == "NoSuchKey" {}
        let grace = objectGrace.inSeconds
        var next: [String: String] = [:]
        for name in unreferenced.sorted() {
            let since = seen[name].flatMap(BucketRetention.parseDate) ?? now
            if grace == 0 || now.timeIntervalSince(since) >= grace {
                try await s3.delete(bucket: layout.bucket, key: layout.objectKey(dataset: dataset, name: name))
                transfer.deleted += 1
            } else {
                next[name] = seen[name] ?? BucketRetention.formatDate(now)
            }
        }
        if next != seen {
            if next.isEmpty {
                try await s3.delete(bucket: layout.bucket, key: listKey)
            } else {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
                try await s3.put(
                    bucket: layout.bucket, key: listKey, body: try encoder.encode(next), contentType: "application/json"
                )
            }
        }
        // A crashed publisher's multipart uploads.
        for upload in try await s3.listMultipartUploads(bucket: layout.bucket, prefix: layout.datasetPrefix(dataset)) {
            let started = BucketRetention.parseDate(upload.initiated) ?? now
            // Grace 0 aborts every one, whatever the server's clock says.
            guard grace == 0 || now.timeIntervalSince(started) >= grace else { continue }
            try await s3.abortMultipartUpload(bucket: layout.bucket, key: upload.key, uploadID: upload.uploadID)
            transfer.abortedUploads += 1
        }
    }
}

extension BucketPublisher {
    /// A publisher into `location` with the S3 settings of the AWS variables (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, and `endpoint` or else `AWS_ENDPOINT_URL`).
    public static func fromEnvironment(
        configuration: Publisher.Configuration, location: S3Location, endpoint: String?, objectGrace: Duration,
        logger: Logger, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> BucketPublisher {
        let s3 = S3Client(configuration: try S3Configuration.fromEnvironment(environment, endpoint: endpoint))
        return BucketPublisher(
            configuration: configuration, s3: s3, layout: BucketLayout(location: location), objectGrace: objectGrace,
            logger: logger)
    }

    /// The default cache directory of a bucket store: `${XDG_CACHE_HOME:-$HOME/.cache}/ferry/s3/BUCKET/PREFIX`.
    public static func defaultCacheDirectory(
        for location: S3Location, environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> URL {
        let base =
            environment["XDG_CACHE_HOME"].flatMap { $0.isEmpty ? nil : URL(fileURLWithPath: $0) }
            ?? URL(fileURLWithPath: environment["HOME"] ?? NSHomeDirectory()).appendingPathComponent(".cache")
        return base.appendingPathComponent("ferry/s3/\(location.bucket)/\(location.prefix)", isDirectory: true)
    }
}
