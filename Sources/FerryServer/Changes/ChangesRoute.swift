import FerryCore
import FerryMerge
import FerryStore
import Foundation
import Hummingbird
import NIOCore

/// `POST /v1/datasets/{dataset}/changes`: decodes and checks the batch (400 with a JSON error and nothing applied
/// when malformed, 413 and the connection closed when over the body limit), hands it to the dataset's ``ChangeMerger``
/// and answers `200 {"results":[…]}` in request order.
///
/// It is a ``ServerRouteGroup``: ``buildApplication(_:logger:onServerRunning:)`` adds it itself when the
/// configuration names a database; to build a router by hand, pass it to
/// ``buildRouter(_:catalog:logger:extraRoutes:scopeAuthorities:)``.
///
/// ```swift
/// let router = try buildRouter(configuration, catalog: catalog, logger: logger, extraRoutes: [ChangesRoute(mergers: ["trips": merger])])
/// ```
public struct ChangesRoute: ServerRouteGroup {
    /// One merger per dataset that has writable tables.
    public let mergers: [String: ChangeMerger]
    /// Body size and batch limits.
    public let limits: ChangeRequest.Limits

    public init(mergers: [String: ChangeMerger], limits: ChangeRequest.Limits = .init()) {
        self.mergers = mergers
        self.limits = limits
    }

    /// Adds `POST /v1/datasets/{dataset}/changes` to the server's routes.
    public func addRoutes(to routes: ServerRoutes) throws {
        let access = routes.access
        let status = routes.configuration.dependencies.statusBoard
        status.recordMergers(mergers)
        let attachments = StoreHeldAttachments(store: routes.configuration.effectiveAttachmentStore)
        routes.on("/v1/datasets/{dataset}/changes", method: .post) { request, context in
            try await self.respond(
                to: request, dataset: context.parameters.get("dataset") ?? "", access: access, status: status,
                attachments: attachments)
        }
    }

    func respond(
        to request: Request, dataset: String, access: DatasetAccess, status: StatusBoard? = nil,
        attachments: (any HeldAttachments)? = nil
    ) async throws -> Response {
        guard DatasetName.isValid(dataset) else {
            return Self.error(
                .badRequest, code: .badInput,
                "dataset name '\(dataset.prefix(64))' is invalid: use 1-64 characters from a-z, 0-9, '_' and '-'")
        }
        // A retired schema line takes no edits: 410 with the reason, nothing applied (docs/schema-lines.md).
        do {
            _ = try access.catalog.resolve(dataset, accepted: nil)
        } catch let error as ServerError where error.status == .gone {
            access.catalog.devices.record(request.headers, dataset: dataset)
            return Self.error(.gone, code: error.code, error.message)
        } catch {
            // Any other answer of the resolution (no line published) is the merger lookup's below.
        }
        guard let merger = mergers[dataset] else {
            return Self.error(
                .notFound, code: .notFound,
                "dataset '\(dataset)' accepts no changes (unknown, or no table is writable: true)")
        }
        // Counted (and noted for the fleet) only for a dataset that takes changes: a made-up name adds nothing.
        access.catalog.devices.record(request.headers, dataset: dataset)
        // On a scoped dataset the token decides the scope every change is checked against (401 without one).
        let scope = merger.isScoped ? try await access.scope(of: request, dataset: dataset) : nil
        // A body over the limit is answered 413 as soon as that is known (from Content-Length, or after reading
        // the limit of a chunked body) and the connection is closed: the rest is never read or buffered.
        let tooLarge = Self.error(
            .contentTooLarge, code: .badInput,
            "the request body is over the limit of \(limits.maxBodyBytes) bytes; send fewer changes per batch",
            closeConnection: true)
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > limits.maxBodyBytes {
            return tooLarge
        }
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: limits.maxBodyBytes)
        } catch is NIOTooManyBytesError {
            return tooLarge
        }
        let batch: ChangeBatch
        do {
            batch = try ChangeRequest.decode(Data(body.readableBytesView), limits: limits)
        } catch let error as FerryError {
            return Self.error(.badRequest, code: error.code, error.description)
        }
        let results: ChangeResults
        do {
            results = try await merger.apply(batch, scope: scope, attachments: attachments)
        } catch let error as FerryError where error.code == .badInput {
            return Self.error(.badRequest, code: error.code, error.description)
        } catch {
            status?.recordUpload(dataset: dataset, results: nil)
            return Self.error(
                .serviceUnavailable, code: .database, "the changes could not be applied; retry later (\(error))")
        }
        status?.recordUpload(dataset: dataset, results: results)
        access.catalog.devices.notePush(headers: request.headers, dataset: dataset, results: results.results)
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        return Response(
            status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: AnswerJSON.encode(results))))
    }

    /// `{"error":{"code","message"}}`, the server's error shape.
    static func error(
        _ status: HTTPResponse.Status, code: FerryError.Code, _ message: String, closeConnection: Bool = false
    ) -> Response {
        error(status, code: code.rawValue, message, closeConnection: closeConnection)
    }

    static func error(
        _ status: HTTPResponse.Status, code: String, _ message: String, closeConnection: Bool = false
    ) -> Response {
        struct Envelope: Encodable {
            struct Body: Encodable {
                let code: String
                let message: String
            }
            let error: Body
        }
        // Encoding two strings cannot fail.
        let data = (try? JSONEncoder().encode(Envelope(error: .init(code: code, message: message)))) ?? Data()
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        headers[.cacheControl] = "no-store"
        if closeConnection { headers[.connection] = "close" }  // CloseAfterResponseHandler closes it
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// The changes route's ``HeldAttachments``: an attachment is held when the server's attachment store has it, under
/// the dataset's base name (its schema lines share attachments).
struct StoreHeldAttachments: HeldAttachments {
    let store: any AttachmentStore

    func missing(_ names: Set<String>, dataset: String) async throws -> Set<String> {
        let base = DatasetName.base(of: dataset) ?? dataset
        var missing: Set<String> = []
        for name in names where try await store.info(dataset: base, sha256: name) == nil { missing.insert(name) }
        return missing
    }
}
