import FerryCore
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The directory store's attachments:
///
/// ```
/// STORE/DATASET/attachments/<sha256>        the bytes (immutable; renamed into place after fsync)
/// STORE/DATASET/attachments/<sha256>.json   its AttachmentInfo
/// STORE/DATASET/attachments/tmp/            scratch of an add that crossed file systems; garbage after a crash
/// ```
///
/// The info is written first and the bytes renamed last: the bytes' rename is the commit, so an info without bytes
/// (a crash between the two) is an attachment not held, overwritten by the next upload. Blocking work runs on a
/// thread of its own (`ThreadJob.run`, docs/ARCHITECTURE.md "Concurrency").
///
/// ```swift
/// let store = FileAttachmentStore(root: URL(fileURLWithPath: "snapshots"))
/// let url = try await store.file(dataset: "notes", sha256: sha256)
/// ```
public struct FileAttachmentStore: AttachmentStore {
    public let root: URL

    public init(root: URL) {
        self.root = root.standardizedFileURL
    }

    /// `STORE/DATASET/attachments/`.
    public func directory(dataset: String) -> URL {
        root.appendingPathComponent(dataset, isDirectory: true).appendingPathComponent("attachments", isDirectory: true)
    }

    /// The bytes of attachment `sha256`.
    public func dataURL(dataset: String, sha256: String) -> URL {
        directory(dataset: dataset).appendingPathComponent(sha256)
    }

    /// The info of attachment `sha256`.
    public func infoURL(dataset: String, sha256: String) -> URL {
        directory(dataset: dataset).appendingPathComponent("\(sha256).json")
    }

    public func info(dataset: String, sha256: String) async throws -> AttachmentInfo? {
        guard Attachment.isID(sha256) else { return nil }
        return try await ThreadJob.run(name: "ferry-attachment") { try readInfo(dataset: dataset, sha256: sha256) }
    }

    public func file(dataset: String, sha256: String) async throws -> URL? {
        guard Attachment.isID(sha256) else { return nil }
        let url = dataURL(dataset: dataset, sha256: sha256)
        return FileManager.default.fileExists(atPath: url.path) ? url : nil
    }

    public func add(dataset: String, sha256: String, file: URL, contentType: String, uploader: String?) async throws
        -> (info: AttachmentInfo, created: Bool)
    {
        guard Attachment.isID(sha256) else {
            throw FerryError(
                .badInput, "'\(sha256.prefix(80))' is not an attachment name (64 lowercase hex characters)")
        }
        return try await ThreadJob.run(name: "ferry-attachment") {
            try addBlocking(dataset: dataset, sha256: sha256, file: file, contentType: contentType, uploader: uploader)
        }
    }

    public func list(dataset: String) async throws -> [AttachmentInfo] {
        try await ThreadJob.run(name: "ferry-attachment") {
            let directory = self.directory(dataset: dataset)
            guard FileManager.default.fileExists(atPath: directory.path) else { return [] }
            let names: [String]
            do {
                names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
            } catch {
                throw FerryError(
                    .io, "cannot list the attachments: \(error.localizedDescription)", path: directory.path)
            }
            return try names.filter(Attachment.isID).sorted().compactMap {
                try readInfo(dataset: dataset, sha256: $0)
            }
        }
    }

    public func delete(dataset: String, sha256: String) async throws {
        guard Attachment.isID(sha256) else { return }
        try await ThreadJob.run(name: "ferry-attachment") {
            try DurableFile.remove(dataURL(dataset: dataset, sha256: sha256))
            try DurableFile.remove(infoURL(dataset: dataset, sha256: sha256))
            try DurableFile.syncDirectory(directory(dataset: dataset))
        }
    }

    /// The info of a held attachment (its bytes exist); one whose info is missing or unreadable is described from
    /// its bytes (size, modification time) so it is still served and, later, retained or deleted.
    func readInfo(dataset: String, sha256: String) throws -> AttachmentInfo? {
        let data = dataURL(dataset: dataset, sha256: sha256)
        // No bytes: not held.
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: data.path) else { return nil }
        let size = (attributes[.size] as? NSNumber)?.int64Value ?? 0
        // An unreadable info is rebuilt from the bytes below; the bytes are what counts.
        if let text = try? Data(contentsOf: infoURL(dataset: dataset, sha256: sha256)),
            var info = try? AttachmentInfo.decode(text), info.sha256 == sha256  // damaged: rebuilt below
        {
            info.size = size
            return info
        }
        return AttachmentInfo(
            sha256: sha256, size: size, contentType: "application/octet-stream",
            uploadedAt: attributes[.modificationDate] as? Date ?? Date())
    }

    private func addBlocking(dataset: String, sha256: String, file: URL, contentType: String, uploader: String?) throws
        -> (info: AttachmentInfo, created: Bool)
    {
        let directory = self.directory(dataset: dataset)
        try DurableFile.makeDirectory(directory)
        if var held = try readInfo(dataset: dataset, sha256: sha256) {
            try DurableFile.remove(file)
            // Uploaded again: the grace starts again, and the uploader may read it.
            held.uploadedAt = Date()
            if let uploader, !held.uploaders.contains(uploader) { held.uploaders.append(uploader) }
            try DurableFile.write(try held.encoded(), to: infoURL(dataset: dataset, sha256: sha256))
            return (held, false)
        }
        let size = try FileManager.default.attributesOfItem(atPath: file.path)[.size] as? NSNumber
        let info = AttachmentInfo(
            sha256: sha256, size: size?.int64Value ?? 0, contentType: contentType, uploadedAt: Date(),
            uploaders: uploader.map { [$0] } ?? [])
        try DurableFile.write(try info.encoded(), to: infoURL(dataset: dataset, sha256: sha256))
        try DurableFile.sync(file)
        let target = dataURL(dataset: dataset, sha256: sha256)
        if Foundation.rename(file.path, target.path) != 0 {
            guard errno == EXDEV else { throw DurableFile.posixError("cannot move the upload to", target.path) }
            // Another file system (a bucket mode's cache): copy beside the target, fsync, rename.
            let scratch = directory.appendingPathComponent("tmp", isDirectory: true)
            try DurableFile.makeDirectory(scratch)
            let copy = scratch.appendingPathComponent("\(sha256)-\(UUID().uuidString)")
            _ = try FileClone.clone(
                file, to: copy, "cannot copy the upload", fix: "free space in \(root.path)", durable: true)
            try DurableFile.rename(copy, to: target)
            try DurableFile.remove(file)
            return (info, true)
        }
        try DurableFile.syncDirectory(directory)
        return (info, true)
    }
}
