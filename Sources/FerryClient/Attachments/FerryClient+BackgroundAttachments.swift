import FerryCore
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

extension FerryClient {
    /// The whole-body upload of queued attachment `sha256` (`PUT …/attachments/{sha256}`, its content type and the
    /// access token set) and the file to send, for a background `URLSession` upload task
    /// (`session.uploadTask(with: request, fromFile: file)`), which the system runs while the app is suspended. The
    /// attachment stays queued: the next ``push(batchSize:)`` finds the server holds it (`HEAD`, 200) and takes it
    /// off the queue, or uploads what is missing. Nil when it is not queued.
    ///
    /// ```swift
    /// if let (request, file) = try await client.backgroundAttachmentUpload(for: sha) {
    ///     backgroundSession.uploadTask(with: request, fromFile: file).resume()
    /// }
    /// ```
    public func backgroundAttachmentUpload(for sha256: String) async throws -> (URLRequest, URL)? {
        let store = deviceAttachments
        guard let entry = try await BlockingWork.run({ try store.entry(sha256) }), store.contains(sha256) else {
            return nil
        }
        var request = URLRequest(url: try attachmentsURL().appendingPathComponent(sha256))
        request.httpMethod = "PUT"
        request.setValue(entry.contentType, forHTTPHeaderField: "Content-Type")
        for (name, value) in try await attachmentHeaders()() { request.setValue(value, forHTTPHeaderField: name) }
        return (request, store.url(for: sha256))
    }

    /// The download of attachment `sha256` (`GET …/attachments/{sha256}`, the access token set), for a background
    /// `URLSession` download task; hand the finished file to ``adoptAttachment(_:file:)``.
    ///
    /// ```swift
    /// backgroundSession.downloadTask(with: try await client.backgroundAttachmentRequest(for: sha)).resume()
    /// ```
    public func backgroundAttachmentRequest(for sha256: String) async throws -> URLRequest {
        try DeviceAttachments.requireID(sha256)
        var request = URLRequest(url: try attachmentsURL().appendingPathComponent(sha256))
        for (name, value) in try await attachmentHeaders()() { request.setValue(value, forHTTPHeaderField: name) }
        return request
    }

    /// Takes the file a background download of attachment `sha256` wrote: verified by its SHA-256, then moved into
    /// the client directory (fsynced, renamed). A file whose bytes do not match is deleted and throws
    /// `FerryError.Code.verification`; download it again.
    ///
    /// ```swift
    /// let url = try await client.adoptAttachment(sha, file: keptFile)
    /// ```
    @discardableResult
    public func adoptAttachment(_ sha256: String, file: URL) async throws -> URL {
        let store = deviceAttachments
        return try await BlockingWork.run {
            let digest = try FileDigest.sha256Hex(of: file)
            guard digest == sha256 else {
                try DurableFile.remove(file)
                throw FerryError(
                    .verification, "the downloaded attachment's SHA-256 is \(digest), not its name; it was deleted",
                    path: file.path, key: sha256)
            }
            try store.makeDirectories()
            let temp = store.temporaryURL()
            do {
                try FileManager.default.moveItem(at: file, to: temp)
            } catch {
                throw FerryError(
                    .io, "cannot move the downloaded attachment in: \(error.localizedDescription)", path: file.path)
            }
            try DurableFile.sync(temp)
            try DurableFile.rename(temp, to: store.url(for: sha256))
            return store.url(for: sha256)
        }
    }
}
