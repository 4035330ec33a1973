import FerryCore
import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// Maps a bearer token to its scope value for one scoped dataset. The token itself never reaches an authority:
/// only the lowercase SHA-256 hex of its bytes does.
///
/// ```swift
/// struct Fixed: ScopeAuthority {
///     func scope(forTokenSHA256 hash: String) async throws -> String? { hash == knownHash ? "1" : nil }
/// }
/// ```
public protocol ScopeAuthority: Sendable {
    /// The scope value of the token whose SHA-256 hex is `hash`, or nil when the token is unknown (401).
    /// Throw when the answer cannot be had now (503; the client retries).
    func scope(forTokenSHA256 hash: String) async throws -> String?
}

/// Caches an authority's answers, positive and negative, for at most `ttl` (default 5 s): a revoked or changed
/// token takes effect within that window, and a 304 revalidation storm does not become a query storm.
/// Keys are token hashes; the cache holds at most `maxEntries` (expired ones are dropped first, then all).
public final class TokenScopes: Sendable {
    struct Entry: Sendable {
        let scope: String?
        let expires: ContinuousClock.Instant
    }

    let authority: any ScopeAuthority
    let ttl: Duration
    let maxEntries: Int
    private let cache = Locked([String: Entry]())

    public init(authority: any ScopeAuthority, ttl: Duration = .seconds(5), maxEntries: Int = 10_000) {
        self.authority = authority
        self.ttl = ttl
        self.maxEntries = maxEntries
    }

    /// The scope of `token`, nil when the authority does not know it.
    public func scope(forToken token: String) async throws -> String? {
        let hash = Self.hash(token)
        let now = ContinuousClock.now
        if let hit = cache.withLock({ $0[hash] }), hit.expires > now { return hit.scope }
        let scope = try await authority.scope(forTokenSHA256: hash)
        let entry = Entry(scope: scope, expires: ContinuousClock.now + ttl)
        cache.withLock { entries in
            if entries.count >= maxEntries {
                entries = entries.filter { $0.value.expires > now }
                if entries.count >= maxEntries { entries.removeAll(keepingCapacity: true) }
            }
            entries[hash] = entry
        }
        return scope
    }

    /// Lowercase SHA-256 hex of the token's UTF-8 bytes: what `scope.token` receives as `$1`.
    public static func hash(_ token: String) -> String {
        FileDigest.sha256Hex(bytes: Array(token.utf8))
    }
}

/// Decides what a request may read or write on a dataset: the public view, or (for a scoped dataset) the view of
/// the scope its bearer token maps to. Every refusal is a ``ServerError`` that never contains the token or its hash.
public struct DatasetAccess: Sendable {
    let catalog: SnapshotCatalog
    /// One resolver per scoped dataset the server was configured for (`--config` templates with `scope:`).
    let scopes: [String: TokenScopes]
    let logger: Logger

    /// The bearer token of the request, or a 401.
    static func bearerToken(_ request: Request, dataset: String) throws -> String {
        guard let header = request.headers[.authorization] else {
            throw unauthorized("dataset '\(dataset)' needs an access token: send `Authorization: Bearer <token>`", invalidToken: false)
        }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw unauthorized("dataset '\(dataset)' needs a bearer token: send `Authorization: Bearer <token>`", invalidToken: false)
        }
        let token = parts[1].trimmingCharacters(in: .whitespaces)
        // RFC 6750 b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=".utf8)
        guard !token.isEmpty, token.utf8.count <= 4096, token.utf8.allSatisfy(allowed.contains) else {
            throw unauthorized("the access token is malformed; re-authenticate", invalidToken: true)
        }
        return token
    }

    static func unauthorized(_ message: String, invalidToken: Bool) -> ServerError {
        var headers = HTTPFields()
        headers[.wwwAuthenticate] = invalidToken ? #"Bearer realm="ferry", error="invalid_token""# : #"Bearer realm="ferry""#
        return ServerError(.unauthorized, code: "unauthorized", message, headers: headers)
    }

    /// The scope value the request's token maps to on scoped dataset `dataset`; throws 401 or 503.
    public func scope(of request: Request, dataset: String) async throws -> String {
        guard let resolver = scopes[dataset] else {
            logger.error(
                "scoped dataset requested but this server has no token check for it; give the server its template and database (ServerConfiguration.database)",
                metadata: ["dataset": .string(dataset)])
            throw ServerError(
                .serviceUnavailable, code: "unavailable",
                "dataset '\(dataset)' needs an access check this server is not configured for; tell its operator")
        }
        let token = try Self.bearerToken(request, dataset: dataset)
        let scope: String?
        do {
            scope = try await resolver.scope(forToken: token)
        } catch {
            // The error may quote the query's parameter (the token's hash): log only its kind.
            logger.error("the token query failed", metadata: ["dataset": .string(dataset), "error": .string(String(describing: type(of: error)))])
            throw ServerError(.serviceUnavailable, code: "unavailable", "the access token cannot be checked right now; retry later")
        }
        guard let scope else {
            throw Self.unauthorized("the access token is not valid (unknown or revoked); re-authenticate", invalidToken: true)
        }
        return scope
    }

    /// What `request` may read of dataset `name`: the public view, or its scope's. 404 for an unknown dataset or a
    /// scope with no snapshot yet.
    func view(_ request: Request, dataset name: String) async throws -> (view: SnapshotCatalog.SnapshotView, scoped: Bool) {
        guard let dataset = catalog.dataset(name) else { throw SnapshotResponder.unknownDataset(name) }
        switch dataset.access {
        case .everyone(let view):
            return (view, false)
        case .scoped(let views):
            let scope = try await self.scope(of: request, dataset: name)
            guard let view = views[scope] else {
                throw ServerError(
                    .notFound, code: .notFound,
                    "dataset '\(name)' has no snapshot for your access scope yet; it appears at the next publish")
            }
            return (view, true)
        }
    }
}
