import FerryCore
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import NIOPosix

/// Attachments (docs/http-api.md, "Attachments"): `PUT|GET|HEAD /v1/datasets/{dataset}/attachments/{sha256}`,
/// and the resumable uploads of tus 1.0.0 under `/v1/datasets/{dataset}/attachments/uploads`
/// (`AttachmentRoutes+Tus.swift`).
///
/// A body is written to a temp file in the uploads directory (``PartialUploads``) and hashed as it streams; only a
/// body whose SHA-256 is its name goes into the ``AttachmentStore``, which renames it into place after an fsync. A
/// GET is answered as a version URL is (``ReadAnswer``: `If-None-Match`, `Range`, `If-Range`), with the bytes
/// streamed from the file under the server's buffer budget.
struct AttachmentRoutes: ServerRouteGroup {
    let store: any AttachmentStore
    let uploads: PartialUploads
    let snapshots: SnapshotResponder
    let metrics: ServerMetrics
    let maxBytes: Int64
    let partialExpiry: Duration
    /// Public attachments served lately, which the channel then sends itself with `sendfile`.
    let files: AttachmentFiles

    static let mismatchCode = "attachmentMismatch"

    func addRoutes(to routes: ServerRoutes) throws {
        let access = AttachmentAccess(
            access: routes.access, store: store, names: AttachmentNamesCache(catalog: routes.catalog))
        let path = "/v1/datasets/{dataset}/attachments/{sha256}"
        routes.on(path, method: .put) { request, context in try await put(request, context: context, access: access) }
        for method in [HTTPRequest.Method.get, .head] {
            routes.on(path, method: method) { request, context in
                try await read(request, context: context, access: access)
            }
        }
        addTusRoutes(to: routes, access: access)
    }

    /// The `{dataset}` and `{sha256}` of the URL: 400 unless valid.
    static func target(_ context: some RequestContext) throws -> (dataset: String, sha256: String) {
        let dataset = try SnapshotResponder.datasetName(context)
        let sha256 = context.parameters.get("sha256") ?? ""
        guard Attachment.isID(sha256) else {
            throw ServerError(
                .badRequest, code: .badInput,
                "attachment '\(sha256.prefix(80))' is malformed: name an attachment by the SHA-256 of its bytes, 64 lowercase hex characters"
            )
        }
        return (dataset, sha256)
    }

    // MARK: GET, HEAD

    func read(_ request: Request, context: some RequestContext, access: AttachmentAccess) async throws -> Response {
        let (name, sha256) = try Self.target(context)
        let caller = try await access.caller(request, dataset: name)
        guard let info = try await access.readable(sha256, by: caller),
            let url = try await store.file(dataset: caller.dataset, sha256: sha256),
            let file = try await NIOThreadPool.singleton.runIfActive({ try OpenFile.open(path: url.path) })
        else {
            throw ServerError(
                .notFound, code: .notFound,
                "dataset '\(caller.dataset)' has no attachment \(sha256) (or not one you may read); upload it first")
        }
        var fields = HTTPFields()
        fields[.contentType] = info.contentType
        fields[.eTag] = "\"\(sha256)\""
        fields[.acceptRanges] = "bytes"
        fields[.cacheControl] = caller.scope == nil ? CachePolicy.version : CachePolicy.scopedVersion
        if let digest = FileDigest.reprDigest(hex: sha256) { fields[.reprDigest] = digest }
        let representation = VersionEntry.Representation(
            file: file, etag: "\"\(sha256)\"", opaqueTag: Substring(sha256), size: file.size, latestHeaders: fields,
            versionHeaders: fields, object: ObjectName(sha256: sha256, kind: .attachment))
        if caller.scope == nil, caller.served == name {
            files.remember(dataset: name, sha256: sha256, file: file, fields: fields)
        }
        if let value = request.headers[.ifNoneMatch], let condition = ConditionalHeaders.noneMatch(value[...]) {
            let matches =
                switch condition {
                case .any: true
                case .tags(let tags): tags.contains(representation.opaqueTag)
                }
            if matches { return Response(status: .notModified, headers: representation.versionNotModified) }
        }
        return snapshots.response(
            try ReadAnswer.ranged(
                representation, fields: fields, method: request.method, headers: request.headers,
                what: "attachment \(sha256)"))
    }

    /// The caller of an upload (`PUT`, tus): a refused token is counted as a refusal (`auth`).
    func uploader(_ request: Request, dataset name: String, access: AttachmentAccess) async throws
        -> AttachmentAccess.Caller
    {
        do {
            return try await access.caller(request, dataset: name)
        } catch let error as ServerError where error.status == .unauthorized {
            metrics.recordAttachmentRefusal(dataset: DatasetName.base(of: name) ?? name, reason: "auth")
            throw error
        }
    }

    // MARK: PUT

    func put(_ request: Request, context: some RequestContext, access: AttachmentAccess) async throws -> Response {
        let (name, sha256) = try Self.target(context)
        let caller = try await uploader(request, dataset: name, access: access)
        let contentType = try Self.contentType(request.headers[.contentType])
        if let length = request.headers[.contentLength] {
            guard let size = Int64(length), size >= 0 else {
                throw ServerError(.badRequest, code: .badInput, "Content-Length '\(length.prefix(40))' is malformed")
            }
            if size > maxBytes { throw tooLarge(dataset: caller.dataset) }
        }
        let temp = try await NIOThreadPool.singleton.runIfActive { try uploads.wholeUploadURL(dataset: caller.dataset) }
        let file = try await VerifiedFileWriter.upload(temp, .new)
        do {
            do {
                _ = try await file.append(request.body, limit: maxBytes)
            } catch UploadStreamEnd.overLimit {
                throw tooLarge(dataset: caller.dataset)
            } catch {
                // A cut link: nothing is kept of a whole upload (tus resumes; PUT starts again).
                throw ServerError(
                    .badRequest, code: .badInput, "the body ended early (\(error)); nothing was stored",
                    headers: [.connection: "close"])
            }
            do {
                try await file.finish(expecting: .init(sha256: sha256))
            } catch let error as FerryError where error.code == .verification {
                metrics.recordAttachmentRefusal(dataset: caller.dataset, reason: "mismatch")
                throw Self.mismatch(sha256)
            }
        } catch {
            // Our own temp file; the error above says what failed, and the sweep removes a leftover.
            await file.discard()
            throw error
        }
        return try await store(temp, dataset: caller.dataset, sha256: sha256, contentType: contentType, caller: caller)
    }

    /// Moves a verified upload into the store and answers 201 (stored now) or 200 (held already).
    func store(_ file: URL, dataset: String, sha256: String, contentType: String, caller: AttachmentAccess.Caller)
        async throws -> Response
    {
        let (info, created) = try await store.add(
            dataset: dataset, sha256: sha256, file: file, contentType: contentType, uploader: caller.tokenHash)
        if created { metrics.recordAttachmentStored(dataset: dataset, bytes: info.size) }
        var headers = HTTPFields()
        headers[.location] = "/v1/datasets/\(dataset)/attachments/\(sha256)"
        headers[.eTag] = "\"\(sha256)\""
        return Self.json(created ? .created : .ok, Stored(sha256: sha256, size: info.size), headers)
    }

    /// A `Content-Type` to store: a `type/subtype` with optional parameters, printable ASCII, at most 255 bytes;
    /// absent means `application/octet-stream`.
    static func contentType(_ value: String?) throws -> String {
        guard let value else { return "application/octet-stream" }
        let bytes = value.utf8
        guard !bytes.isEmpty, bytes.count <= 255, bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7f }),
            let slash = value.firstIndex(of: "/"), slash != value.startIndex,
            value[value.index(after: slash)...].first.map({ $0 != ";" && $0 != " " }) == true
        else {
            throw ServerError(
                .badRequest, code: .badInput,
                "Content-Type '\(value.prefix(80))' is malformed: send a media type such as image/jpeg")
        }
        return value
    }

    /// 413 for an attachment over the limit; `close`: the request's body is not read, so the connection closes.
    func tooLarge(dataset: String, close: Bool = true) -> ServerError {
        metrics.recordAttachmentRefusal(dataset: dataset, reason: "too-large")
        return ServerError(
            .contentTooLarge, code: .badInput,
            "the attachment is over this server's limit of \(maxBytes) bytes (--max-attachment-bytes)",
            headers: close ? [.connection: "close"] : [:])
    }

    static func mismatch(_ sha256: String) -> ServerError {
        ServerError(
            .unprocessableContent, code: mismatchCode,
            "the body's SHA-256 is not \(sha256): the bytes were damaged or are another file's; nothing was stored")
    }

    /// The body of a stored upload's answer: `{"sha256":…,"size":…}`.
    struct Stored: Encodable {
        let sha256: String
        let size: Int64
    }

    static func json(_ status: HTTPResponse.Status, _ value: Stored, _ extra: HTTPFields = [:]) -> Response {
        var headers = extra
        headers[.contentType] = "application/json"
        headers[.cacheControl] = "no-store"
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        // Encoding a string and a number cannot fail.
        let body = ByteBuffer(bytes: (try? encoder.encode(value)) ?? Data("{}".utf8))
        return Response(status: status, headers: headers, body: .init(byteBuffer: body))
    }
}
