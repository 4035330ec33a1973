import FerryCore
import FerryServer
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOFoundationEssentialsCompat

/// The real Ferry routes behind a bearer-token check that keeps to the server's access contract (docs/http-api.md):
/// every `/v1/datasets/...` request needs `Authorization: Bearer <token>`; a missing or unknown token gets 401 with
/// `WWW-Authenticate: Bearer realm="ferry"` (plus `error="invalid_token"` when one was sent) and a JSON error body.
/// `forbiddenToken` gets 403. It records what each request carried, so tests can check what the client sent.
///
/// It stands in for the server side of access rights, which lives in the server; the routes behind it are Ferry's own.
struct TokenGate<Inner: HTTPResponder>: HTTPResponder where Inner.Context == BasicRequestContext {
    typealias Context = BasicRequestContext

    struct Seen: Sendable, Equatable {
        var method: HTTPRequest.Method
        var path: String
        var authorization: String?
        var range: String?
        /// Change ids of a `POST .../changes` body.
        var changeIDs: [String]
        var status: Int
    }

    actor Log {
        private(set) var requests: [Seen] = []
        func record(_ seen: Seen) { requests.append(seen) }
        var changeUploads: [Seen] { requests.filter { $0.path.hasSuffix("/changes") } }
    }

    let token: String
    var forbiddenToken: String? = nil
    let inner: Inner
    let log = Log()

    func respond(to request: Request, context: BasicRequestContext) async throws -> Response {
        var request = request
        let path = request.uri.path
        let authorization = request.headers[.authorization]
        var ids: [String] = []
        if path.hasSuffix("/changes") {
            let body = try await request.collectBody(upTo: 16 << 20)
            ids = (try? JSONDecoder().decode(ChangeBatch.self, from: Data(buffer: body)))?.changes.map(\.id) ?? []
        }
        var seen = Seen(
            method: request.method, path: path, authorization: authorization, range: request.headers[.range],
            changeIDs: ids, status: 0)
        let response: Response
        if !path.hasPrefix("/v1/datasets/") || authorization == "Bearer \(token)" {
            response = try await inner.respond(to: request, context: context)
        } else if let forbiddenToken, authorization == "Bearer \(forbiddenToken)" {
            response = Self.error(.forbidden, "forbidden", "this token does not grant the dataset", challenge: nil)
        } else {
            response = Self.error(
                .unauthorized, "unauthorized",
                authorization == nil ? "this dataset needs an access token" : "unknown access token",
                challenge: authorization == nil
                    ? #"Bearer realm="ferry""# : #"Bearer realm="ferry", error="invalid_token""#)
        }
        seen.status = Int(response.status.code)
        await log.record(seen)
        return response
    }

    static func error(_ status: HTTPResponse.Status, _ code: String, _ message: String, challenge: String?) -> Response
    {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        headers[.cacheControl] = "no-store"
        if let challenge { headers[.wwwAuthenticate] = challenge }
        let body = #"{"error":{"code":"\#(code)","message":"\#(message)"}}"#
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }
}

/// A real Ferry server (read routes plus `extraRoutes`) behind a ``TokenGate`` on 127.0.0.1 port 0, for `body`.
/// `body` gets the base URL, the gate (for its log) and a function that makes the server see new versions now.
func withGatedFerryServer<T: Sendable>(
    store: URL, token: String, forbiddenToken: String? = nil, extraRoutes: [any ServerRouteGroup] = [],
    _ body:
        @Sendable @escaping (
            _ url: URL, _ gate: TokenGate<RouterResponder<BasicRequestContext>>,
            _ refresh: @Sendable () async throws -> Void
        )
        async throws -> T
) async throws -> T {
    let configuration = ServerConfiguration(storePath: store, port: 0)
    let catalog = SnapshotCatalog(store: FileSnapshotStore(root: store), pollInterval: .seconds(1), logger: .test)
    try await catalog.refresh()
    let router = try buildRouter(configuration, catalog: catalog, logger: .test, extraRoutes: extraRoutes)
    let gate = TokenGate(token: token, forbiddenToken: forbiddenToken, inner: router.buildResponder())
    let app = Application(
        responder: gate, configuration: .init(address: .hostname("127.0.0.1", port: 0)), logger: .test)
    return try await app.test(.live) { client in
        try await body(URL(string: "http://127.0.0.1:\(client.port!)")!, gate, { try await catalog.refresh() })
    }
}

/// A token an app swaps when it signs in again: what a ``FerryClient/Configuration/tokenProvider`` reads.
actor TokenBox {
    private(set) var token: String?
    init(_ token: String?) { self.token = token }
    func set(_ token: String?) { self.token = token }
}
