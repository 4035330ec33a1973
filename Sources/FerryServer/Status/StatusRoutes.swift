import FerryCore
import FerryPostgres
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// `GET /status` (an HTML page with inline SVG plots) and `GET /status.json` (the same ``StatusReport`` as JSON),
/// for the operator. Registered only when ``ServerConfiguration/statusToken`` is set, so without one both paths
/// answer 404. Every answer, refusals included, carries `Cache-Control: no-store`; the page also carries a
/// Content-Security-Policy that allows nothing but its own inline styles and `data:` URLs, so it can load nothing
/// from elsewhere.
///
/// ```swift
/// configuration.statusToken = "s3cret-operator-token"   // then: curl -H "Authorization: Bearer s3cret-operator-token" …/status.json
/// ```
struct StatusRoutes: ServerRouteGroup {
    let access: StatusAccess
    let board: StatusBoard
    /// How the report names the store (``ServerDependencies/storeName``, else the directory).
    let store: String

    static let contentSecurityPolicy =
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    func addRoutes(to routes: ServerRoutes) throws {
        let catalog = routes.catalog
        let scopes = routes.access.scopes
        let access = self.access
        let board = self.board
        let store = self.store
        @Sendable func report(_ request: Request) throws -> StatusReport {
            do {
                try access.check(request)
            } catch var error as ServerError {
                error.headers[.cacheControl] = "no-store"
                throw error
            }
            // Each token check's connection state as its pool recorded it (no query to PostgreSQL here).
            let tokenChecks = scopes.mapValues {
                (($0 as? TokenScopes)?.authority as? PostgresScopeAuthority)?.connectionHealth
            }
            return StatusReport.make(
                catalog: catalog.statusSnapshot(), board: board, tokenChecks: tokenChecks, store: store,
                attachments: catalog.metrics?.attachmentsHeld.withLock { $0 } ?? [:])
        }
        routes.on("/status", method: .get) { request, _ in
            let html = StatusPage.render(try report(request))
            var headers = Self.headers(contentType: "text/html; charset=utf-8")
            headers[.contentSecurityPolicy] = Self.contentSecurityPolicy
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: html)))
        }
        routes.on("/status.json", method: .get) { request, _ in
            let data = try report(request).jsonData()
            return Response(
                status: .ok, headers: Self.headers(contentType: "application/json"),
                body: .init(byteBuffer: ByteBuffer(bytes: data)))
        }
    }

    static func headers(contentType: String) -> HTTPFields {
        var headers = HTTPFields()
        headers[.contentType] = contentType
        headers[.cacheControl] = "no-store"
        headers[.referrerPolicy] = "no-referrer"  // a ?token= URL never leaks through a Referer
        headers[.xContentTypeOptions] = "nosniff"
        return headers
    }
}

extension HTTPField.Name {
    static let referrerPolicy = HTTPField.Name("Referrer-Policy")!
}
