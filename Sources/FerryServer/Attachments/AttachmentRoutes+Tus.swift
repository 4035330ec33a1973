import FerryCore
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import NIOPosix

/// Resumable uploads: tus 1.0.0, core with the creation, expiration and termination extensions
/// (https://tus.io/protocols/resumable-upload), under `/v1/datasets/{dataset}/attachments/uploads`:
/// - `OPTIONS …/uploads`: what the server speaks, and `Tus-Max-Size`;
/// - `POST …/uploads` with `Upload-Length` and `Upload-Metadata: sha256 <base64>,contentType <base64>` creates an
///   empty partial upload (201, `Location`, `Upload-Expires`);
/// - `HEAD …/uploads/{id}`: `Upload-Offset`, the bytes held durably (fsynced);
/// - `PATCH …/uploads/{id}` appends a body at the held offset (409 at another one). When the connection breaks
///   mid-body, or the body ends short of the length, the bytes that arrived are kept and fsynced with the upload's
///   description, so the next `HEAD` reports them even after a crash. Once the offset reaches the length the file
///   is checked (hashed as it arrived when one PATCH carried it all, else whole, from disk): a match stores the
///   attachment as `PUT` does, a mismatch deletes the partial upload (422 `attachmentMismatch`);
/// - `DELETE …/uploads/{id}` deletes it.
///
/// Why tus and not the IETF draft: docs/http-api.md, "Attachments".
extension AttachmentRoutes {
    func addTusRoutes(to routes: ServerRoutes, access: AttachmentAccess) {
        let collection = "/v1/datasets/{dataset}/attachments/uploads"
        let one = collection + "/{upload}"
        let locks = Locked(Set<String>())
        routes.on(collection, method: .options) { _, context in
            _ = try SnapshotResponder.datasetName(context)
            var headers = Self.tusHeaders
            headers[.tusVersion] = Attachment.Tus.version
            headers[.tusExtension] = Attachment.Tus.extensions
            headers[.tusMaxSize] = String(maxBytes)
            return Response(status: .noContent, headers: headers)
        }
        routes.on(collection, method: .post) { request, context in
            try await Self.tus { try await create(request, context: context, access: access) }
        }
        routes.on(one, method: .head) { request, context in
            try await Self.tus {
                let (caller, id, upload, offset) = try await partial(request, context: context, access: access)
                var headers = Self.tusHeaders
                headers[.uploadOffset] = String(offset)
                headers[.uploadLength] = String(upload.length)
                headers[.uploadExpires] = expires(upload)
                headers[.cacheControl] = "no-store"
                _ = (caller, id)
                return Response(status: .ok, headers: headers)
            }
        }
        routes.on(one, method: .patch) { request, context in
            try await Self.tus { try await patch(request, context: context, access: access, locks: locks) }
        }
        routes.on(one, method: .delete) { request, context in
            try await Self.tus {
                let (caller, id, _, _) = try await partial(request, context: context, access: access)
                try await NIOThreadPool.singleton.runIfActive { try uploads.remove(dataset: caller.dataset, id: id) }
                return Response(status: .noContent, headers: Self.tusHeaders)
            }
        }
    }

    static var tusHeaders: HTTPFields {
        var headers = HTTPFields()
        headers[.tusResumable] = Attachment.Tus.version
        return headers
    }

    /// Runs a tus handler: its errors carry `Tus-Resumable` too.
    static func tus(_ body: () async throws -> Response) async throws -> Response {
        do {
            return try await body()
        } catch var error as ServerError {
            error.headers[.tusResumable] = Attachment.Tus.version
            throw error
        }
    }

    /// 412 unless `Tus-Resumable: 1.0.0`.
    static func checkResumable(_ request: Request) throws {
        guard request.headers[.tusResumable] == Attachment.Tus.version else {
            var headers = HTTPFields()
            headers[.tusVersion] = Attachment.Tus.version
            throw ServerError(
                .preconditionFailed, code: .badInput,
                "this server speaks tus \(Attachment.Tus.version) only: send `Tus-Resumable: \(Attachment.Tus.version)`",
                headers: headers)
        }
    }

    /// `Upload-Expires` of `upload`: its creation plus the expiry, as an HTTP date.
    func expires(_ upload: PartialUploads.PartialUpload) -> String {
        HTTPDate.format(Int(upload.created.addingTimeInterval(partialExpiry.inSeconds).timeIntervalSince1970))
    }

    // MARK: POST

    func create(_ request: Request, context: some RequestContext, access: AttachmentAccess) async throws -> Response {
        let name = try SnapshotResponder.datasetName(context)
        try Self.checkResumable(request)
        guard let lengthText = request.headers[.uploadLength], let length = Self.digits(lengthText) else {
            throw ServerError(
                .badRequest, code: .badInput,
                "Upload-Length is missing or malformed: send the attachment's size in bytes, digits only")
        }
        let metadata = try Self.metadata(request.headers[.uploadMetadata])
        guard let sha256 = metadata["sha256"], Attachment.isID(sha256) else {
            throw ServerError(
                .badRequest, code: .badInput,
                "Upload-Metadata needs `sha256 <base64 of the attachment's SHA-256 in 64 lowercase hex characters>`")
        }
        let contentType = try Self.contentType(metadata["contentType"])
        let caller = try await uploader(request, dataset: name, access: access)
        if length > maxBytes { throw tooLarge(dataset: caller.dataset, close: false) }
        let upload = PartialUploads.PartialUpload(
            length: length, sha256: sha256, contentType: contentType, uploader: caller.tokenHash,
            createdAt: Timestamp.format(Date()))
        let id = try await NIOThreadPool.singleton.runIfActive { try uploads.create(dataset: caller.dataset, upload) }
        var headers = Self.tusHeaders
        headers[.location] = "/v1/datasets/\(name)/attachments/uploads/\(id)"
        headers[.uploadOffset] = "0"
        headers[.uploadExpires] = expires(upload)
        headers[.cacheControl] = "no-store"
        if length == 0 {  // nothing to send: the empty attachment is complete now
            let file = try await VerifiedFileWriter.upload(
                uploads.dataURL(dataset: caller.dataset, id: id), .keptPrefix)
            _ = try await finish(id: id, upload: upload, caller: caller, file: file)
        }
        return Response(status: .created, headers: headers)
    }

    /// 1–18 ASCII digits: a length or offset, never a sign, space or overflow.
    static func digits(_ text: String) -> Int64? {
        let bytes = text.utf8
        guard !bytes.isEmpty, bytes.count <= 18, bytes.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        return Int64(text)
    }

    /// `Upload-Metadata`: comma-separated `key base64value` pairs (a key alone has an empty value), keys unique and
    /// free of spaces and commas, values strict base64 of UTF-8. 400 for anything else.
    static func metadata(_ header: String?) throws -> [String: String] {
        guard let header else { return [:] }
        func bad(_ why: String) -> ServerError {
            ServerError(.badRequest, code: .badInput, "Upload-Metadata is malformed: \(why)")
        }
        var out: [String: String] = [:]
        for pair in header.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = pair.trimmingCharacters(in: .whitespaces).split(
                separator: " ", omittingEmptySubsequences: false)
            guard parts.count == 1 || parts.count == 2, let key = parts.first, !key.isEmpty,
                key.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f })
            else { throw bad("each pair is `key base64value`, separated by commas") }
            guard out[String(key)] == nil else { throw bad("key '\(key.prefix(40))' appears twice") }
            guard parts.count == 2 else {
                out[String(key)] = ""
                continue
            }
            guard let data = Data(base64Encoded: String(parts[1])), let value = String(data: data, encoding: .utf8)
            else { throw bad("the value of '\(key.prefix(40))' is not base64 of UTF-8 text") }
            out[String(key)] = value
        }
        return out
    }

    // MARK: HEAD, DELETE

    /// The caller and the partial upload a `…/uploads/{id}` URL names: 404 when unknown, expired (then deleted) or
    /// another token's; 412 without `Tus-Resumable`.
    func partial(_ request: Request, context: some RequestContext, access: AttachmentAccess) async throws -> (
        caller: AttachmentAccess.Caller, id: String, upload: PartialUploads.PartialUpload, offset: Int64
    ) {
        let name = try SnapshotResponder.datasetName(context)
        let id = context.parameters.get("upload") ?? ""
        guard PartialUploads.isID(id) else {
            throw ServerError(
                .badRequest, code: .badInput,
                "upload '\(id.prefix(40))' is malformed: an upload id is 32 hex characters")
        }
        try Self.checkResumable(request)
        let caller = try await uploader(request, dataset: name, access: access)
        let uploads = self.uploads
        let expiry = partialExpiry.inSeconds
        let found = try await NIOThreadPool.singleton.runIfActive { () -> (PartialUploads.PartialUpload, Int64)? in
            guard let (upload, offset) = try uploads.state(dataset: caller.dataset, id: id) else { return nil }
            if upload.created.addingTimeInterval(expiry) < Date() {
                try uploads.remove(dataset: caller.dataset, id: id)
                return nil
            }
            return (upload, offset)
        }
        guard let (upload, offset) = found, upload.uploader == caller.tokenHash || upload.uploader == nil else {
            throw ServerError(
                .notFound, code: .notFound,
                "upload \(id) is unknown or expired (partial uploads are kept a day); start again with POST")
        }
        return (caller, id, upload, offset)
    }

    // MARK: PATCH

    func patch(
        _ request: Request, context: some RequestContext, access: AttachmentAccess, locks: Locked<Set<String>>
    ) async throws -> Response {
        let (caller, id, upload, _) = try await partial(request, context: context, access: access)
        guard request.headers[.contentType] == Attachment.Tus.patchContentType else {
            throw ServerError(
                .unsupportedMediaType, code: .badInput,
                "a PATCH body is `Content-Type: application/offset+octet-stream`")
        }
        guard let offsetText = request.headers[.uploadOffset], let offset = Self.digits(offsetText) else {
            throw ServerError(
                .badRequest, code: .badInput, "Upload-Offset is missing or malformed: send the offset, digits only")
        }
        guard locks.withLock({ $0.insert(id).inserted }) else {
            throw ServerError(
                .conflict, code: "offset-mismatch", "upload \(id) is receiving another PATCH; HEAD it later")
        }
        defer { locks.withLock { _ = $0.remove(id) } }
        // The offset is read under the upload's locks (this server's, and the file's for servers sharing the
        // directory), so no other PATCH moves it between the check and the append.
        let file = try await VerifiedFileWriter.upload(uploads.dataURL(dataset: caller.dataset, id: id), .keptPrefix)
        guard file.tryLock() else {
            throw ServerError(
                .conflict, code: "offset-mismatch", "upload \(id) is receiving another PATCH; HEAD it later")
        }
        let held = file.size
        guard offset == held else {
            throw ServerError(
                .conflict, code: "offset-mismatch",
                "Upload-Offset \(offset) is not the \(held) bytes the server holds of upload \(id); HEAD it and resume from there",
                headers: [.uploadOffset: String(held)])
        }
        let room = upload.length - held
        if let length = request.headers[.contentLength].flatMap(Self.digits), length > room {
            throw ServerError(
                .badRequest, code: .badInput,
                "the body of \(length) bytes runs past Upload-Length (\(upload.length) bytes, \(held) held)",
                headers: [.connection: "close"])
        }
        if held > 0 { metrics.recordAttachmentResume(dataset: caller.dataset) }
        let written: Int64
        do {
            written = try await file.append(request.body, limit: room)
        } catch UploadStreamEnd.overLimit {
            try await file.truncate(to: held)
            throw ServerError(
                .badRequest, code: .badInput,
                "the body runs past Upload-Length (\(upload.length) bytes); nothing of it was kept",
                headers: [.connection: "close"])
        } catch {
            // The connection broke mid-body: what arrived is kept, durably, for the next HEAD. The answer goes
            // nowhere; it is a 400 so that the log does not call a client's cut link a server failure.
            try await keep(file, dataset: caller.dataset, id: id)
            throw ServerError(
                .badRequest, code: .badInput,
                "the body of the PATCH of upload \(id) ended early (\(error)); HEAD it and resume from its offset",
                headers: [.connection: "close"])
        }
        let offsetNow = held + written
        var headers = Self.tusHeaders
        headers[.uploadOffset] = String(offsetNow)
        headers[.uploadExpires] = expires(upload)
        if offsetNow == upload.length {
            // `finish` fsyncs the bytes before it checks them; the upload's description is deleted, never needed.
            _ = try await finish(id: id, upload: upload, caller: caller, file: file)
        } else {
            try await keep(file, dataset: caller.dataset, id: id)
        }
        return Response(status: .noContent, headers: headers)
    }

    /// Keeps the bytes a PATCH left short of the length for a resume: they are fsynced, and so is the upload's
    /// description (``PartialUploads/persist(dataset:id:)``), so the offset a `HEAD` reports survives a crash.
    func keep(_ file: VerifiedFileWriter, dataset: String, id: String) async throws {
        try await file.sync()
        let uploads = self.uploads
        try await NIOThreadPool.singleton.runIfActive { try uploads.persist(dataset: dataset, id: id) }
    }

    /// A complete partial upload: verified (hashed as it was written when one PATCH carried it all, else whole, from
    /// disk); stored under its name when the hash matches (then its description goes), deleted with a 422 when not.
    func finish(
        id: String, upload: PartialUploads.PartialUpload, caller: AttachmentAccess.Caller, file: VerifiedFileWriter
    ) async throws -> Response {
        do {
            try await file.finish(expecting: .init(sha256: upload.sha256, size: upload.length))
        } catch let error as FerryError where error.code == .verification {
            metrics.recordAttachmentRefusal(dataset: caller.dataset, reason: "mismatch")
            try await NIOThreadPool.singleton.runIfActive { try uploads.remove(dataset: caller.dataset, id: id) }
            throw Self.mismatch(upload.sha256)
        }
        let response = try await store(
            file.url, dataset: caller.dataset, sha256: upload.sha256, contentType: upload.contentType, caller: caller)
        try await NIOThreadPool.singleton.runIfActive { try uploads.remove(dataset: caller.dataset, id: id) }
        return response
    }
}

extension HTTPField.Name {
    /// tus 1.0.0's fields (https://tus.io/protocols/resumable-upload).
    static let tusResumable = HTTPField.Name(Attachment.Tus.resumable)!
    static let tusVersion = HTTPField.Name(Attachment.Tus.versionHeader)!
    static let tusExtension = HTTPField.Name(Attachment.Tus.extensionHeader)!
    static let tusMaxSize = HTTPField.Name(Attachment.Tus.maxSize)!
    static let uploadLength = HTTPField.Name(Attachment.Tus.uploadLength)!
    static let uploadOffset = HTTPField.Name(Attachment.Tus.uploadOffset)!
    static let uploadMetadata = HTTPField.Name(Attachment.Tus.uploadMetadata)!
    static let uploadExpires = HTTPField.Name(Attachment.Tus.uploadExpires)!
}
