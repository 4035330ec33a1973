import FerryCore
import FerryPostgres
import Foundation
import Logging

/// How ``ServerWiring`` starts the JWT side: one ``JWKSKeys`` for the server (fetched once at start, before the
/// first request), one ``JWTScopes`` per dataset whose template names a claim.
enum JWTWiring {
    /// The check of `template` (whose scope is `claim`), creating and loading the shared key set on first use.
    /// A template naming a claim on a server without `--jwks` is an error saying so.
    static func scopes(
        _ template: Template, claim: ClaimPath, settings: ServerConfiguration.DatabaseSettings,
        keys: inout JWKSKeys?, logger: Logger
    ) async throws -> JWTScopes {
        guard let jwt = settings.jwt, !jwt.jwks.isEmpty else {
            throw FerryError(
                .badTemplate,
                "dataset '\(template.dataset)' takes its scope from the JWT claim `\(claim)`, but the server has no keys to verify JWTs with: give `ferry serve --jwks URL|FILE` (the identity provider's JWKS), or use `scope.token`",
                path: template.path, key: "scope.claim")
        }
        let shared: JWKSKeys
        if let keys {
            shared = keys
        } else {
            shared = JWKSKeys(settings: jwt, logger: logger)
            // Unreachable now: logged, and retried by the key set's service; JWT-scoped datasets answer 503 meanwhile.
            await shared.refetch(force: true)
            keys = shared
        }
        logger.info("JWT check ready", metadata: ["dataset": "\(template.dataset)", "claim": "\(claim)"])
        return JWTScopes(claim: claim, keys: shared, settings: jwt)
    }
}

extension ServerWiring {
    /// Every scoped dataset's token check: opaque ones cached for `ttl`, JWT ones until each token's expiry.
    func tokenChecks(ttl: Duration) -> [String: any TokenCheck] {
        var checks: [String: any TokenCheck] = scopeAuthorities.mapValues { TokenScopes(authority: $0, ttl: ttl) }
        for (dataset, scopes) in jwtScopes { checks[dataset] = scopes }
        return checks
    }
}
