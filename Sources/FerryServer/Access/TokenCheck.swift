import Foundation
import HTTPTypes
import Logging

/// One scoped dataset's token check: opaque tokens looked up by a template's `scope.token` query
/// (``TokenScopes``), or JWTs verified against the JWKS with the scope in a claim (``JWTScopes``). A template uses
/// one kind; a server may serve datasets of both.
protocol TokenCheck: Sendable {
    /// The scope `token` maps to on `dataset`, or a ``ServerError``: 401 (``BearerRefusal/invalidToken(_:)``), 403
    /// (``BearerRefusal/insufficientScope(dataset:description:)``) or 503 (cannot be checked now, said in `logger`).
    func checkedScope(forToken token: String, dataset: String, logger: Logger) async throws -> String
    /// The scope of `token` if a fresh answer is cached, without asking anyone or verifying anything (the channel's
    /// 304 fast path, ``ChannelRevalidator``); nil otherwise.
    func freshScope(forToken token: String) -> String?
    /// When an accepted token stops being valid (a JWT's `exp` plus leeway); nil when it has no end.
    func expiry(ofToken token: String) -> Date?
    /// The answer for a scope the dataset has no snapshot for.
    func noSnapshot(dataset: String, scope: String) -> ServerError
}

extension TokenScopes: TokenCheck {
    func checkedScope(forToken token: String, dataset: String, logger: Logger) async throws -> String {
        let scope: String?
        do {
            scope = try await self.scope(forToken: token)
        } catch {
            // The error may quote the query's parameter (the token's hash): log only its kind.
            logger.error(
                "the token query failed",
                metadata: ["dataset": .string(dataset), "error": .string(String(describing: type(of: error)))])
            throw ServerError(
                .serviceUnavailable, code: "unavailable", "the access token cannot be checked right now; retry later")
        }
        guard let scope else { throw BearerRefusal.invalidToken(.unknown) }
        return scope
    }

    func freshScope(forToken token: String) -> String? {
        if case .some(.some(let scope)) = cachedScope(forToken: token) { return scope }
        return nil
    }

    func expiry(ofToken token: String) -> Date? { nil }

    func noSnapshot(dataset: String, scope: String) -> ServerError { DatasetAccess.noScopeSnapshot(dataset) }
}
