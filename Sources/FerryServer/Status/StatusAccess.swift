import FerryCore
import Foundation
import HTTPTypes
import Hummingbird

/// Who may read the status page: a request with `Authorization: Bearer <status token>`, or one from a loopback
/// address with `?token=<status token>` (so an operator's browser on the machine can open it). Anything else is
/// a 401 with `WWW-Authenticate: Bearer realm="ferry"`.
///
/// A request that names a proxy hop (`X-Forwarded-For`, `Forwarded` or `X-Real-IP`) is not local even though its
/// connection comes from 127.0.0.1: nginx on the same machine forwards remote clients from there. Such a request
/// must send the bearer header; its `?token=` is refused. (deploy/nginx/ferry.conf also refuses `?token=` itself.)
///
/// Tokens are compared in constant time: both sides are hashed with SHA-256 and the digests compared byte by byte
/// without an early exit, so neither the position of the first difference nor the token's length shows in the
/// timing. The token never appears in an error, a log line or a page.
struct StatusAccess: Sendable {
    /// SHA-256 of the configured token.
    private let expected: [UInt8]

    init(token: String) {
        expected = Self.digest(token)
    }

    /// Throws a 401 unless the request carries the token in an accepted way.
    func check(_ request: Request) throws {
        if let header = request.headers[.authorization] {
            let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
            guard parts.count == 2, parts[0].lowercased() == "bearer",
                matches(String(parts[1]).trimmingCharacters(in: .whitespaces))
            else {
                throw Self.unauthorized("the status token is wrong; send `Authorization: Bearer <status token>`")
            }
            return
        }
        if let query = request.uri.queryParameters.get("token") {
            guard !Self.proxyHeaders.contains(where: { request.headers[$0] != nil }) else {
                throw Self.unauthorized(
                    "?token= is accepted only from this machine, not through a proxy; send `Authorization: Bearer <status token>`"
                )
            }
            guard LoopbackPeerHandler.isLoopback(request) else {
                throw Self.unauthorized(
                    "?token= is accepted only from this machine; send `Authorization: Bearer <status token>`")
            }
            guard matches(query) else { throw Self.unauthorized("the status token is wrong") }
            return
        }
        throw Self.unauthorized("the status page needs the status token: send `Authorization: Bearer <status token>`")
    }

    /// Headers a proxy adds for the client it forwards: their presence means the peer address is the proxy's.
    static let proxyHeaders: [HTTPField.Name] = [
        HTTPField.Name("X-Forwarded-For")!, HTTPField.Name("Forwarded")!, HTTPField.Name("X-Real-IP")!,
    ]

    /// Constant-time comparison of the candidate's digest with the expected one.
    func matches(_ candidate: String) -> Bool {
        let digest = Self.digest(candidate)
        var difference: UInt8 = 0
        for (a, b) in zip(digest, expected) { difference |= a ^ b }
        return difference == 0 && digest.count == expected.count
    }

    static func digest(_ token: String) -> [UInt8] {
        Array(FileDigest.sha256Hex(bytes: Array(token.utf8)).utf8)
    }

    static func unauthorized(_ message: String) -> ServerError {
        ServerError(.unauthorized, code: "unauthorized", message, headers: [.wwwAuthenticate: #"Bearer realm="ferry""#])
    }
}
