import FerryCore
import FerryTestSupport
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore

/// The provider's JWKS endpoint: a Hummingbird app on port 0 answering `GET /jwks` with ``document``, counting
/// requests. Nil document: 503 (the provider is down).
final class JWKSServer: Sendable {
    let document: Locked<String?>
    let requests = Locked(0)

    init(_ document: String?) { self.document = Locked(document) }

    /// Runs `body` with the JWKS URL while the endpoint serves.
    func serve(_ body: @Sendable (_ url: String) async throws -> Void) async throws {
        let router = Router()
        router.get("/jwks") { _, _ -> Response in
            self.requests.withLock { $0 += 1 }
            guard let document = self.document.withLock({ $0 }) else { return Response(status: .serviceUnavailable) }
            return Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: .init(string: document)))
        }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in
            try await body("http://127.0.0.1:\(client.port!)/jwks")
        }
    }
}
