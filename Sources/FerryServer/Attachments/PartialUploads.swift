import FerryCore
import FerryStore
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The server-local directory of uploads not yet verified (``ServerDependencies/attachmentUploads``):
///
/// ```
/// UPLOADS/DATASET/<id>           a partial upload's bytes (tus): appended by PATCH, fsynced after each
/// UPLOADS/DATASET/<id>.json      its PartialUpload: length, sha256, content type, uploader, creation time;
///                                fsynced once the upload keeps bytes for a resume (``persist(dataset:id:)``)
/// UPLOADS/DATASET/put-<uuid>     a whole upload (PUT) being received and hashed
/// ```
///
/// Nothing here is ever served: a file leaves only through ``AttachmentStore/add(dataset:sha256:file:contentType:uploader:)``
/// once its SHA-256 matched. Partial uploads, and files of whole uploads a crash left, older than
/// ``ServerConfiguration/partialUploadExpiry`` are deleted by ``sweep(olderThan:)``. Every method blocks: call them
/// on a thread pool.
struct PartialUploads: Sendable {
    let root: URL

    /// A partial upload's description, written once by `POST`, made durable by ``persist(dataset:id:)``.
    struct PartialUpload: Codable, Sendable, Equatable {
        var length: Int64
        var sha256: String
        var contentType: String
        /// SHA-256 hex of the uploading token, nil without one.
        var uploader: String?
        /// ISO-8601 UTC.
        var createdAt: String

        var created: Date { Timestamp.parse(createdAt) ?? .distantPast }
    }

    func directory(dataset: String) -> URL { root.appendingPathComponent(dataset, isDirectory: true) }
    func dataURL(dataset: String, id: String) -> URL { directory(dataset: dataset).appendingPathComponent(id) }
    func infoURL(dataset: String, id: String) -> URL {
        directory(dataset: dataset).appendingPathComponent("\(id).json")
    }

    /// An upload id: 32 lowercase hex characters.
    static func isID(_ text: String) -> Bool {
        let bytes = text.utf8
        return bytes.count == 32 && bytes.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    static func newID() -> String {
        (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    /// Creates an empty partial upload described by `upload`; returns its id.
    ///
    /// Nothing is fsynced yet: most uploads end in the PATCH that follows (the description is then deleted), and the
    /// fsyncs of a description nobody needs were two of the eight per photo. Until ``persist(dataset:id:)`` a power
    /// loss may forget the upload, which holds no bytes then: its `HEAD` is 404 and the client starts again with
    /// `POST`, as the protocol says. No reader sees the description half-written: its id is unknown until `POST`
    /// answers, and a torn one after a crash reads as absent (``state(dataset:id:)``).
    func create(dataset: String, _ upload: PartialUpload) throws -> String {
        let directory = self.directory(dataset: dataset)
        try DurableFile.makeDirectory(directory)
        let id = Self.newID()
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = dataURL(dataset: dataset, id: id)
        guard FileManager.default.createFile(atPath: data.path, contents: nil) else {
            throw FerryError(.io, "cannot create the partial upload", path: data.path)
        }
        let info = infoURL(dataset: dataset, id: id)
        let text = try encoder.encode(upload)
        let fd = open(info.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            let error = DurableFile.posixError("cannot create the partial upload's description", info.path)
            unlink(data.path)
            throw error
        }
        defer { close(fd) }
        do {
            try text.withUnsafeBytes { try DurableFile.writeAll($0, to: fd, path: info.path) }
        } catch {
            unlink(info.path)
            unlink(data.path)
            throw error
        }
        return id
    }

    /// Makes partial upload `id` survive a power loss: its description and both directory entries fsynced (its bytes
    /// are its writer's to fsync). Called whenever a PATCH keeps bytes short of the length, so that the offset a
    /// `HEAD` reports is there after a crash.
    func persist(dataset: String, id: String) throws {
        try DurableFile.sync(infoURL(dataset: dataset, id: id))
        try DurableFile.syncDirectory(directory(dataset: dataset))
    }

    /// The partial upload `id` and the bytes it holds, or nil when unknown.
    func state(dataset: String, id: String) throws -> (upload: PartialUpload, offset: Int64)? {
        guard Self.isID(id),
            let text = try? Data(contentsOf: infoURL(dataset: dataset, id: id)),  // absent: not an upload (404)
            let upload = try? JSONDecoder().decode(PartialUpload.self, from: text),  // damaged: as absent
            let attributes = try? FileManager.default.attributesOfItem(  // bytes gone: as absent
                atPath: dataURL(dataset: dataset, id: id).path)
        else { return nil }
        return (upload, (attributes[.size] as? NSNumber)?.int64Value ?? 0)
    }

    /// Deletes partial upload `id` (its description first, so a half-deleted one is unknown).
    func remove(dataset: String, id: String) throws {
        try DurableFile.remove(infoURL(dataset: dataset, id: id))
        try DurableFile.remove(dataURL(dataset: dataset, id: id))
    }

    /// A new temp file for a whole upload (PUT) of `dataset`.
    func wholeUploadURL(dataset: String) throws -> URL {
        let directory = self.directory(dataset: dataset)
        try DurableFile.makeDirectory(directory)
        return directory.appendingPathComponent("put-\(UUID().uuidString.lowercased())")
    }

    /// Deletes the partial uploads created before `cutoff`, and whole uploads' files last written before it (a
    /// crash's leftovers); returns how many went.
    func sweep(olderThan cutoff: Date) throws -> Int {
        let fm = FileManager.default
        guard fm.fileExists(atPath: root.path) else { return 0 }
        var removed = 0
        for dataset in try fm.contentsOfDirectory(atPath: root.path) where DatasetName.isValid(dataset) {
            let directory = self.directory(dataset: dataset)
            for name in try fm.contentsOfDirectory(atPath: directory.path) {
                let url = directory.appendingPathComponent(name)
                // What cannot be read is judged by its modification time; a file gone meanwhile is skipped.
                let modified = (try? fm.attributesOfItem(atPath: url.path))?[.modificationDate] as? Date
                if Self.isID(name) {
                    // An unreadable description: the file's modification time decides, as said above.
                    let created = (try? state(dataset: dataset, id: name))??.upload.created ?? modified
                    guard let created, created < cutoff else { continue }
                    try remove(dataset: dataset, id: name)
                    removed += 1
                } else if name.hasPrefix("put-") || name.hasPrefix(".") {
                    // A whole upload's temp file, or a description's temp file, that a crash left.
                    guard let modified, modified < cutoff else { continue }
                    try DurableFile.remove(url)
                    removed += 1
                } else if name.hasSuffix(".json"), Self.isID(String(name.dropLast(5))),
                    !fm.fileExists(atPath: dataURL(dataset: dataset, id: String(name.dropLast(5))).path)
                {
                    try DurableFile.remove(url)  // a description whose bytes are gone: unknown already
                }
            }
        }
        return removed
    }
}
