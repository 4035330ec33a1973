import FerryCore
import FerryS3
import FerryStore
import Foundation
import NIOPosix

/// The attachments of a store in a bucket: the directory store's keys under the bucket's prefix
/// (`DATASET/attachments/<sha256>` and `<sha256>.json`), and a local cache laid out as the directory store
/// (``FileAttachmentStore``) that the server sends files from.
///
/// - ``add(dataset:sha256:file:contentType:uploader:)`` uploads the verified bytes first and the info last: an
///   attachment whose info is in the bucket has its bytes there (an S3 PUT is atomic: an object is whole or absent),
///   so the info is what says "held", in the bucket as in the cache.
/// - ``file(dataset:sha256:)`` answers from the cache, or downloads the bytes into it, hashing them on the way:
///   bytes whose SHA-256 is not their name are never cached or served.
/// - Replicas sharing the bucket each serve what any of them stored.
///
/// ```swift
/// let attachments = BucketAttachmentStore(s3: s3, layout: BucketLayout(location: location), cache: cacheDirectory)
/// let url = try await attachments.file(dataset: "notes", sha256: sha256)
/// ```
public struct BucketAttachmentStore: AttachmentStore {
    let s3: S3Client
    let layout: BucketLayout
    /// The local copies, as the directory store lays them out under `cache`.
    let cached: FileAttachmentStore

    public init(s3: S3Client, layout: BucketLayout, cache: URL) {
        self.s3 = s3
        self.layout = layout
        self.cached = FileAttachmentStore(root: cache)
    }

    /// The key of `name` (`<sha256>` or `<sha256>.json`) of `dataset`'s attachments.
    public func key(dataset: String, name: String) -> String {
        layout.location.key("\(dataset)/attachments/\(name)")
    }

    public func info(dataset: String, sha256: String) async throws -> AttachmentInfo? {
        guard Attachment.isID(sha256) else { return nil }
        let key = key(dataset: dataset, name: sha256 + ".json")
        guard case .object(let object) = try await s3.getIfPresent(bucket: layout.bucket, key: key) else {
            return nil
        }
        do {
            return try AttachmentInfo.decode(object.body)
        } catch {
            throw FerryError(
                .store, "the info of attachment \(sha256) in the bucket is not readable: \(error)", path: key)
        }
    }

    public func file(dataset: String, sha256: String) async throws -> URL? {
        if let local = try await cached.file(dataset: dataset, sha256: sha256) { return local }
        guard let info = try await info(dataset: dataset, sha256: sha256) else { return nil }
        let folder = cached.directory(dataset: dataset)
        let temp = folder.appendingPathComponent(".download-\(UUID().uuidString)")
        do {
            try await NIOThreadPool.singleton.runIfActive { try DurableFile.makeDirectory(folder) }
            let key = key(dataset: dataset, name: sha256)
            let got = try await s3.download(bucket: layout.bucket, key: key, to: temp)
            guard got.sha256 == sha256 else {
                throw FerryError(
                    .verification,
                    "attachment \(sha256) in the bucket has other bytes (their SHA-256 is \(got.sha256)); it is not served",
                    path: key)
            }
            try await keepLocally(temp, info: info, dataset: dataset)
        } catch {
            // A temp name of this call only: what a failed removal leaves is garbage, never served.
            try? FileManager.default.removeItem(at: temp)
            throw error
        }
        return try await cached.file(dataset: dataset, sha256: sha256)
    }

    public func add(dataset: String, sha256: String, file: URL, contentType: String, uploader: String?) async throws
        -> (info: AttachmentInfo, created: Bool)
    {
        guard Attachment.isID(sha256) else {
            throw FerryError(
                .badInput, "'\(sha256.prefix(80))' is not an attachment name (64 lowercase hex characters)")
        }
        let held = try await info(dataset: dataset, sha256: sha256)
        var info: AttachmentInfo
        if let held {
            info = held
        } else {
            let size = try await NIOThreadPool.singleton.runIfActive { try BucketUpload.size(of: file) }
            try await upload(file, size: size, key: key(dataset: dataset, name: sha256), contentType: contentType)
            info = AttachmentInfo(sha256: sha256, size: size, contentType: contentType, uploadedAt: Date())
        }
        var changed = held == nil
        if let uploader, !info.uploaders.contains(uploader) {
            info.uploaders.append(uploader)
            changed = true
        }
        if changed {
            try await s3.put(
                bucket: layout.bucket, key: key(dataset: dataset, name: sha256 + ".json"), body: try info.encoded(),
                contentType: "application/json")
        }
        try await keepLocally(file, info: info, dataset: dataset)
        return (info, held == nil)
    }

    public func list(dataset: String) async throws -> [AttachmentInfo] {
        let prefix = key(dataset: dataset, name: "")
        var infos: [AttachmentInfo] = []
        for object in try await s3.list(bucket: layout.bucket, prefix: prefix) where object.key.hasSuffix(".json") {
            let name = String(object.key.dropFirst(prefix.count).dropLast(".json".count))
            guard Attachment.isID(name), let info = try await info(dataset: dataset, sha256: name) else { continue }
            infos.append(info)
        }
        return infos.sorted { $0.sha256 < $1.sha256 }
    }

    /// Deletes the info first (then the attachment is not held, here or on any replica), then the bytes and the
    /// local copy.
    public func delete(dataset: String, sha256: String) async throws {
        guard Attachment.isID(sha256) else { return }
        try await s3.delete(bucket: layout.bucket, key: key(dataset: dataset, name: sha256 + ".json"))
        try await s3.delete(bucket: layout.bucket, key: key(dataset: dataset, name: sha256))
        try await cached.delete(dataset: dataset, sha256: sha256)
    }

    /// One PUT up to 32 MiB, a multipart upload beyond (parts of 8 MiB, two in flight), as the publisher uploads.
    private func upload(_ file: URL, size: Int64, key: String, contentType: String) async throws {
        if size > 32 << 20 {
            try await BucketUpload.multipart(
                s3: s3, bucket: layout.bucket, key: key, file: file, size: size, partSize: 8 << 20, inFlight: 2)
        } else {
            let body = try await NIOThreadPool.singleton.runIfActive { try BucketUpload.read(file) }
            try await s3.put(bucket: layout.bucket, key: key, body: body, contentType: contentType)
        }
    }

    /// Moves a verified file into the cache under the bucket's info (its upload time, its uploaders), as the
    /// directory store commits: the info, then the bytes' rename. A copy already cached is kept.
    private func keepLocally(_ file: URL, info: AttachmentInfo, dataset: String) async throws {
        let cached = self.cached
        try await NIOThreadPool.singleton.runIfActive {
            let folder = cached.directory(dataset: dataset)
            try DurableFile.makeDirectory(folder)
            try DurableFile.write(try info.encoded(), to: cached.infoURL(dataset: dataset, sha256: info.sha256))
            let target = cached.dataURL(dataset: dataset, sha256: info.sha256)
            if FileManager.default.fileExists(atPath: target.path) {
                try DurableFile.remove(file)
                return
            }
            try DurableFile.sync(file)
            try DurableFile.rename(file, to: target)
            try DurableFile.syncDirectory(folder)
        }
    }
}
