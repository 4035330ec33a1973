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

    /// The scope of `token` if the cache holds a fresh answer for it (nil inside: the authority does not know the
    /// token), without asking the authority: the channel (``ChannelRevalidator``) answers only what the cache already knows.
    func cachedScope(forToken token: String) -> String?? {
        let hash = Self.hash(token)
        let now = ContinuousClock.now
        guard let hit = cache.withLock({ $0[hash] }), hit.expires > now else { return nil }
        return .some(hit.scope)
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
    /// One token check per scoped dataset the server was configured for (`--config` templates with `scope:`).
    let scopes: [String: any TokenCheck]
    let logger: Logger

    /// What an `Authorization` header holds.
    enum Credential: Equatable {
        case missing, notBearer, malformed
        case bearer(String)

        init(_ header: String?) {
            guard let header else {
                self = .missing
                return
            }
            let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
            guard parts.count == 2, parts[0].lowercased() == "bearer" else {
                self = .notBearer
                return
            }
            let token = parts[1].trimmingCharacters(in: .whitespaces)
            // RFC 6750 b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
            guard !token.isEmpty, token.utf8.count <= 4096, token.utf8.allSatisfy(Self.isTokenByte) else {
                self = .malformed
                return
            }
            self = .bearer(token)
        }

        static func isTokenByte(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                true
            case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "+"),
                UInt8(ascii: "/"), UInt8(ascii: "="):
                true
            default: false
            }
        }
    }

    /// The bearer token of the request, or a 401.
    static func bearerToken(_ request: Request, dataset: String) throws -> String {
        switch Credential(request.headers[.authorization]) {
        case .missing:
            throw unauthorized(
                "dataset '\(dataset)' needs an access token: send `Authorization: Bearer <token>`")
        case .notBearer:
            throw unauthorized(
                "dataset '\(dataset)' needs a bearer token: send `Authorization: Bearer <token>`")
        case .malformed:
            throw BearerRefusal.invalidToken(.malformed)
        case .bearer(let token):
            return token
        }
    }

    /// A 401 for a request without a bearer token (RFC 6750 §3.1: no `error` then).
    static func unauthorized(_ message: String) -> ServerError {
        ServerError(.unauthorized, code: "unauthorized", message, headers: [.wwwAuthenticate: #"Bearer realm="ferry""#])
    }

    /// The token check of dataset `dataset` (the lines of a dataset share its scope definition, and so its check).
    func check(_ dataset: String) -> (any TokenCheck)? {
        scopes[dataset] ?? DatasetName.base(of: dataset).flatMap({ scopes[$0] })
    }

    /// The scope value the request's token maps to on scoped dataset `dataset`; throws 401, 403 or 503.
    public func scope(of request: Request, dataset: String) async throws -> String {
        guard let resolver = check(dataset) else {
            logger.error(
                "scoped dataset requested but this server has no token check for it; give the server its template and database (ServerConfiguration.database)",
                metadata: ["dataset": .string(dataset)])
            throw ServerError(
                .serviceUnavailable, code: "unavailable",
                "dataset '\(dataset)' needs an access check this server is not configured for; tell its operator")
        }
        let token = try Self.bearerToken(request, dataset: dataset)
        return try await resolver.checkedScope(forToken: token, dataset: dataset, logger: logger)
    }

    /// When the request's token stops being valid on `dataset` (a JWT's `exp` plus leeway), once its scope was
    /// checked; nil for an opaque token, a public dataset or no token. A long-poll ends with 401 then.
    func tokenExpiry(_ request: Request, dataset: String) -> Date? {
        guard let resolver = check(dataset), case .bearer(let token) = Credential(request.headers[.authorization])
        else { return nil }
        return resolver.expiry(ofToken: token)
    }

    /// What `request` may read of dataset `name`: the public view, or its scope's. 404 for an unknown dataset or a
    /// scope with no snapshot yet.
    func view(_ request: Request, dataset name: String) async throws -> (
        view: SnapshotCatalog.SnapshotView, scoped: Bool, dataset: String
    ) {
        let (view, scope, dataset) = try await viewAndScope(request, dataset: name)
        return (view, scope != nil, dataset)
    }

    /// The dataset a request for `name` reads: a schema line chosen by the request's `?schema=` when `name` is a
    /// dataset published in lines, `410` for a retired line (``SnapshotCatalog/resolve(_:accepted:)``).
    func resolve(_ request: Request, dataset name: String) throws -> String {
        try catalog.resolve(name, accepted: SchemaLines.accepted(request.uri.queryParameters["schema"]))
    }

    /// ``view(_:dataset:)`` with the scope it was chosen for (nil for a public dataset), so a long-poll can read the
    /// same scope's next view without asking the token authority again (``view(dataset:scope:)``).
    func viewAndScope(_ request: Request, dataset requested: String) async throws -> (
        view: SnapshotCatalog.SnapshotView, scope: String?, dataset: String
    ) {
        let name = try resolve(request, dataset: requested)
        guard let access = catalog.access(name) else { throw SnapshotResponder.unknownDataset(name) }
        catalog.devices.record(request.headers, dataset: name)
        if catalog.partitions(name) == nil, PartitionAccess.stream(inPath: request.uri.path) != nil {
            throw ServerError(
                .notFound, code: .notFound,
                "dataset '\(name)' is not partitioned: read /v1/datasets/\(name)/manifest and the routes beside it")
        }
        switch access {
        case .everyone(let view):
            return (view, nil, name)
        case .scoped(let views):
            if let partitions = catalog.partitions(name) {
                return try await partitionView(request, dataset: name, views: views, partitions: partitions)
            }
            let scope = try await self.scope(of: request, dataset: name)
            catalog.devices.noteScope(headers: request.headers, dataset: name, scope: scope)
            guard let view = views[scope] else {
                throw check(name)?.noSnapshot(dataset: name, scope: scope) ?? Self.noScopeSnapshot(name)
            }
            return (view, scope, name)
        }
    }

    /// The current view of dataset `name` for `scope` (nil: the public view), checked as ``viewAndScope(_:dataset:)``
    /// checked it: a dataset that is gone, or changed from public to scoped or back, is an error the client recovers
    /// from by asking again.
    func view(dataset name: String, scope: String?) throws -> SnapshotCatalog.SnapshotView {
        switch (catalog.access(name), scope) {
        case (.everyone(let view), nil):
            return view
        case (.scoped(let views), .some(let scope)):
            guard let view = views[scope] else { throw Self.noScopeSnapshot(name) }
            return view
        case (nil, _):
            throw SnapshotResponder.unknownDataset(name)
        default:
            throw ServerError(
                .serviceUnavailable, code: "unavailable", "dataset '\(name)' changed its access rules; ask again")
        }
    }

    static func noScopeSnapshot(_ name: String) -> ServerError {
        ServerError(
            .notFound, code: .notFound,
            "dataset '\(name)' has no snapshot for your access scope yet; it appears at the next publish")
    }

    /// What ``view(_:dataset:)`` would answer, when it can be known without waiting: the public view, or the view of
    /// the scope a fresh cache entry gives the request's token. Nil whenever the route would answer an error or
    /// would have to ask the token authority (the channel then passes the request on).
    func cachedView(_ headers: HTTPFields, dataset name: String) -> (view: SnapshotCatalog.SnapshotView, scoped: Bool)?
    {
        guard let access = catalog.access(name) else { return nil }
        catalog.devices.record(headers, dataset: name)
        switch access {
        case .everyone(let view):
            return (view, false)
        case .scoped(let views):
            // A partition's stream is named by the path, which the channel does not read.
            guard catalog.partitions(name) == nil, let resolver = check(name),
                case .bearer(let token) = Credential(headers[.authorization]),
                let scope = resolver.freshScope(forToken: token), let view = views[scope]
            else { return nil }
            return (view, true)
        }
    }
}
