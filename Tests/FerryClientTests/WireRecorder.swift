import FerryCore
import FerryServer
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore

/// The real Ferry routes behind a recorder of what crossed the wire: for every request its path and the headers that
/// select a representation and a range, and for every answer its status, encoding, range, and the body bytes the
/// server actually wrote (with the first few, to tell gzip from SQLite). It can also cut the next snapshot body after
/// some bytes, as a dropped connection would. The routes behind it are Ferry's own.
struct WireRecorder<Inner: HTTPResponder>: HTTPResponder where Inner.Context == BasicRequestContext {
    typealias Context = BasicRequestContext

    struct Exchange: Sendable, Equatable {
        var path: String
        var acceptEncoding: String?
        var ifNoneMatch: String?
        var range: String?
        var ifRange: String?
        var status: Int = 0
        var contentEncoding: String?
        var contentRange: String?
        var etag: String?
        /// Body bytes the server wrote.
        var bodyBytes = 0
        /// The first bytes of the body (up to 4).
        var head: [UInt8] = []
        /// True when the recorder cut this body.
        var cut = false

        var isSnapshot: Bool { path.contains("/versions/") || path.hasSuffix("/snapshot") }
        /// `1f 8b`: the gzip magic.
        var bodyIsGzip: Bool { head.starts(with: [0x1f, 0x8b]) }
    }

    actor Log {
        private(set) var exchanges: [Exchange] = []
        private var cutAfter: Int?

        func start(_ exchange: Exchange) -> Int {
            exchanges.append(exchange)
            return exchanges.count - 1
        }

        /// Cuts the next snapshot body once it has sent at least `bytes` (at a chunk boundary).
        func cutNextSnapshotBody(after bytes: Int) { cutAfter = bytes }

        func takeCut() -> Int? {
            defer { cutAfter = nil }
            return cutAfter
        }

        /// Records `buffer` as written unless the cut is due; returns false when the body must stop here.
        func wrote(_ buffer: ByteBuffer, exchange index: Int, cut: Int?) -> Bool {
            if let cut, exchanges[index].bodyBytes >= cut {
                exchanges[index].cut = true
                return false
            }
            if exchanges[index].head.count < 4 {
                exchanges[index].head += buffer.readableBytesView.prefix(4 - exchanges[index].head.count)
            }
            exchanges[index].bodyBytes += buffer.readableBytes
            return true
        }

        var snapshotExchanges: [Exchange] { exchanges.filter(\.isSnapshot) }
        func reset() { exchanges = [] }
    }

    struct Cut: Error {}

    let inner: Inner
    let log = Log()

    func respond(to request: Request, context: BasicRequestContext) async throws -> Response {
        let headers = request.headers
        var exchange = Exchange(
            path: request.uri.path, acceptEncoding: headers[.acceptEncoding], ifNoneMatch: headers[.ifNoneMatch],
            range: headers[.range],
            ifRange: headers[.ifRange])
        var response: Response
        do {
            response = try await inner.respond(to: request, context: context)
        } catch let error as any HTTPResponseError {
            response = try error.response(from: request, context: context)
        }
        exchange.status = Int(response.status.code)
        exchange.contentEncoding = response.headers[.contentEncoding]
        exchange.contentRange = response.headers[.contentRange]
        exchange.etag = response.headers[.eTag]
        let log = self.log
        let index = await log.start(exchange)
        let cut =
            exchange.isSnapshot && (response.status == .ok || response.status == .partialContent)
            ? await log.takeCut() : nil
        // The same length as the server announced: the wire format stays the server's own.
        let original = response.body
        response.body = ResponseBody(contentLength: original.contentLength) { writer in
            try await original.write(
                writer.map { buffer in
                    guard await log.wrote(buffer, exchange: index, cut: cut) else { throw Cut() }
                    return buffer
                })
        }
        return response
    }
}

/// A real Ferry server (the read routes, 64 KiB chunks) behind a ``WireRecorder`` on 127.0.0.1 port 0, for `body`.
/// `body` gets the base URL, the recorder (for its log and cuts) and a function that makes the server see new
/// versions now.
func withRecordedFerryServer<T: Sendable>(
    store: URL,
    _ body:
        @Sendable @escaping (
            _ url: URL, _ recorder: WireRecorder<RouterResponder<BasicRequestContext>>,
            _ refresh: @Sendable () async throws -> Void
        )
        async throws -> T
) async throws -> T {
    var configuration = ServerConfiguration(storePath: store, port: 0)
    configuration.chunkSize = 64 * 1024
    let catalog = SnapshotCatalog(store: FileSnapshotStore(root: store), pollInterval: .seconds(1), logger: .test)
    try await catalog.refresh()
    let router = try buildRouter(configuration, catalog: catalog, logger: .test)
    let recorder = WireRecorder(inner: router.buildResponder())
    let app = Application(
        responder: recorder, configuration: .init(address: .hostname("127.0.0.1", port: 0)), logger: .test)
    return try await app.test(.live) { client in
        try await body(URL(string: "http://127.0.0.1:\(client.port!)")!, recorder, { try await catalog.refresh() })
    }
}
