import FerryCore
import Foundation
import Logging

extension FerryClient.Configuration {
    /// How attachments are kept on the device (they travel over the client's transport).
    ///
    /// ```swift
    /// config.attachments.cacheBytes = 256 << 20   // on-demand attachments kept: 256 MiB at most
    /// ```
    public struct Attachments: Sendable {
        /// The byte cap of the on-demand attachments kept on the device (an LRU cache); eager attachments and those
        /// queued for upload are never evicted and not counted. Default 1 GiB.
        public var cacheBytes: Int64 = 1 << 30

        public init(cacheBytes: Int64 = 1 << 30) {
            self.cacheBytes = cacheBytes
        }
    }
}

/// What one ``FerryClient/syncAttachments()`` did: the eager attachments downloaded, those it could not get (tried
/// again at the next sync), and those removed.
///
/// ```swift
/// let result = try await client.syncAttachments()
/// if !result.missing.isEmpty { logger.notice("\(result.missing.count) photos still to come") }
/// ```
public struct AttachmentSync: Sendable, Equatable {
    /// Attachments downloaded and verified.
    public var downloaded = 0
    /// Their bytes.
    public var bytes: Int64 = 0
    /// Eager attachments the rows name that the device still lacks (the server does not hold them, or the
    /// download failed): tried again at the next sync.
    public var missing: [String] = []
    /// Attachments removed because no row names them any more (and none is queued for upload).
    public var removed = 0
    /// On-demand attachments evicted to keep the cache under `Configuration.attachments.cacheBytes`.
    public var evicted = 0

    public init() {}
}

extension FerryClient {
    /// The device's attachment files and upload queue.
    public nonisolated var deviceAttachments: DeviceAttachments { DeviceAttachments(directory: directory) }

    /// Copies the file into the client directory and queues it for upload (see ``DeviceAttachments/add(fileAt:contentType:now:)``);
    /// returns its SHA-256, the value to store in the row's attachment column. The next push uploads it before
    /// any edit that names it.
    ///
    /// ```swift
    /// let sha = try await client.addAttachment(fileAt: photoURL, contentType: "image/jpeg")
    /// _ = try await client.execute("UPDATE notes SET photo = '\(sha)' WHERE id = 7")
    /// ```
    public func addAttachment(fileAt url: URL, contentType: String? = nil) async throws -> DeviceAttachments.Added {
        try await deviceAttachments.add(fileAt: url, contentType: contentType)
    }

    /// Stores `data` as an attachment and queues it for upload; returns its SHA-256 (see
    /// ``addAttachment(fileAt:contentType:)``).
    ///
    /// ```swift
    /// let sha = try await client.addAttachment(data: jpeg, contentType: "image/jpeg").sha256
    /// ```
    public func addAttachment(data: Data, contentType: String = "application/octet-stream") async throws
        -> DeviceAttachments.Added
    {
        try await deviceAttachments.add(data: data, contentType: contentType)
    }

    /// The local file of attachment `sha256`, downloaded and verified first when the device lacks it (an on-demand
    /// one, or an eager one not fetched yet). Asking marks it as recently used for the on-demand cache.
    /// Throws `FerryError.Code.notFound` when the server does not hold it.
    ///
    /// ```swift
    /// let url = try await client.attachmentURL(for: note.photo)
    /// imageView.image = UIImage(contentsOfFile: url.path)
    /// ```
    public func attachmentURL(for sha256: String) async throws -> URL {
        let store = deviceAttachments
        try DeviceAttachments.requireID(sha256)
        if store.contains(sha256) {
            store.touch(sha256)
            return store.url(for: sha256)
        }
        _ = try await attachmentDownloader().download(sha256)
        store.touch(sha256)
        // Keep the cache under its cap; the file just asked for is the most recently used, so it stays.
        if directory.exists(directory.database) { _ = try await pruneAttachments() }
        return store.url(for: sha256)
    }

    /// The local file of attachment `sha256` when the device holds it (marked as used for the on-demand cache),
    /// without opening a client: what `ferry attachment path` prints. Throws `FerryError.Code.notFound` when the
    /// device lacks it (``attachmentURL(for:)`` downloads it).
    ///
    /// ```swift
    /// let path = try await FerryClient.attachmentPath(sha, directory: URL(fileURLWithPath: "/data/ferry"))
    /// ```
    public static func attachmentPath(_ sha256: String, directory url: URL) async throws -> String {
        let store = DeviceAttachments(directory: ClientDirectory(url))
        guard Attachment.isID(sha256), store.contains(sha256) else {
            throw FerryError(.notFound, "this device does not hold the attachment", key: sha256)
        }
        store.touch(sha256)
        return store.url(for: sha256).path
    }

    /// The attachments waiting for upload.
    ///
    /// ```swift
    /// let pending = try await client.pendingAttachments()
    /// print(pending.count, pending.map(\.size).reduce(0, +))
    /// ```
    public func pendingAttachments() async throws -> [QueuedAttachment] {
        let store = deviceAttachments
        let logger = self.logger
        return try await BlockingWork.run { try store.queued { logger.warning("\($0)") } }
    }

    /// Brings the device's attachments in line with the live database: downloads (and verifies) every eager one its
    /// rows name that the device lacks, removes those no row names and none queued, and evicts on-demand ones over
    /// the cache cap. A download that fails is reported in ``AttachmentSync/missing`` and tried again next time;
    /// it never fails the rows. `ferry fetch --apply`, ``sync()`` and FerryGRDB run it after installing a version.
    ///
    /// ```swift
    /// try await client.applyPendingUpdate()
    /// let attachments = try await client.syncAttachments()
    /// ```
    public func syncAttachments() async throws -> AttachmentSync {
        var result = AttachmentSync()
        guard directory.exists(directory.database) else { return result }
        let named = try await namedAttachments()
        let store = deviceAttachments
        let wanted = named.filter { $0.value == .eager && !store.contains($0.key) }.keys.sorted()
        if !wanted.isEmpty {
            let downloader = try await attachmentDownloader()
            for (sha256, outcome) in try await Self.download(wanted, with: downloader) {
                switch outcome {
                case .success(let bytes):
                    result.bytes += bytes
                    result.downloaded += 1
                case .failure(let error):
                    logger.notice(
                        "attachment not downloaded; tried again at the next fetch",
                        metadata: ["sha256": "\(sha256)", "error": "\(error)"])
                    result.missing.append(sha256)
                }
            }
        }
        let pruned = try await pruneAttachments(named: named)
        result.removed = pruned.unnamed.count
        result.evicted = pruned.evicted.count
        return result
    }

    /// Attachments downloaded at once by ``syncAttachments()``: while one is hashed and fsynced, the next ones are
    /// on the wire.
    static let downloadsInFlight = 3

    /// Downloads `wanted`, ``downloadsInFlight`` at a time; the outcome of each, in the order of `wanted`. A refused
    /// token stops them all (every other download would be refused too); any other failure is that attachment's.
    static func download(_ wanted: [String], with downloader: AttachmentDownloader) async throws
        -> [(String, Result<Int64, FerryError>)]
    {
        try await withThrowingTaskGroup(of: (Int, Result<Int64, FerryError>).self) { group in
            var outcomes = [Result<Int64, FerryError>?](repeating: nil, count: wanted.count)
            func collect(_ done: (Int, Result<Int64, FerryError>)) throws {
                if case .failure(let error) = done.1, error.code == .unauthorized { throw error }
                outcomes[done.0] = done.1
            }
            for (index, sha256) in wanted.enumerated() {
                if index >= downloadsInFlight, let done = try await group.next() { try collect(done) }
                group.addTask {
                    do {
                        return (index, .success(try await downloader.download(sha256)))
                    } catch let error as FerryError {
                        return (index, .failure(error))
                    } catch {
                        return (index, .failure(FerryError(.network, "\(error)", key: sha256)))
                    }
                }
            }
            while let done = try await group.next() { try collect(done) }
            return zip(wanted, outcomes).compactMap { sha256, outcome in outcome.map { (sha256, $0) } }
        }
    }

    /// Every attachment the live database's rows name; none before the initial sync.
    func namedAttachments() async throws -> [String: Attachment.Download] {
        try await exclusively {
            do {
                return try await useDatabase(notify: false) { try SnapshotMetadata.attachmentNames(in: $0) }
            } catch let error as FerryError where error.code == .noDatabase {
                return [:]
            }
        }
    }

    func pruneAttachments(named: [String: Attachment.Download]? = nil) async throws -> DeviceAttachments.Pruned {
        var names = named ?? [:]
        if named == nil { names = try await namedAttachments() }
        let named = names
        let store = deviceAttachments
        let cap = configuration.attachments.cacheBytes
        let pruned = try await BlockingWork.run { try store.prune(named: named, cacheBytes: cap) }
        if !pruned.unnamed.isEmpty || !pruned.evicted.isEmpty {
            logger.info(
                "attachments removed",
                metadata: ["unnamed": "\(pruned.unnamed.count)", "evicted": "\(pruned.evicted.count)"])
        }
        return pruned
    }

    /// `SERVER/v1/datasets/DATASET/attachments`.
    func attachmentsURL() throws -> URL {
        let (datasets, dataset) = try configuration.datasetURL()
        return datasets.appendingPathComponent(dataset).appendingPathComponent("attachments")
    }

    /// The headers of every attachment request: `Authorization` (asked afresh) and `Ferry-Device`.
    func attachmentHeaders() async throws -> @Sendable () async throws -> [String: String] {
        let device = try await deviceID()
        let provider = configuration.tokenProvider
        return { try await BearerAuthorization.commonHeaders(device: device, provider: provider) }
    }

    func attachmentDownloader() async throws -> AttachmentDownloader {
        AttachmentDownloader(
            store: deviceAttachments, transport: transport, base: try attachmentsURL(),
            commonHeaders: try await attachmentHeaders())
    }

    func attachmentUploader() async throws -> AttachmentUploader {
        AttachmentUploader(
            store: deviceAttachments, transport: transport, base: try attachmentsURL(),
            commonHeaders: try await attachmentHeaders(), attempts: configuration.push.attempts,
            backoff: configuration.push.backoff, logger: logger)
    }
}
