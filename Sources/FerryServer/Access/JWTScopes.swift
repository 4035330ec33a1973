import FerryCore
import FerryPostgres
import Foundation
import Logging

/// A scoped dataset whose template says `scope: {values: …, claim: team}`: a bearer token is a JWT verified against
/// the identity provider's keys (``JWKSKeys``), and its scope is the claim's value.
///
/// Checked, in order: the token's form, its `alg` (RS256, ES256 or EdDSA; `none`, HS* and anything else refused),
/// its `kid` (unknown: one refetch of the JWKS at most per 30 s), that the key takes that algorithm (no algorithm
/// confusion), the signature (by jwt-kit), `exp` (required) and `nbf` with the leeway, `iss` and `aud` when
/// configured, then the claim. Each refusal is its own ``BearerRefusal``.
///
/// A verified token's answer (its scope, or the 403 of a claim naming none) is remembered until its `exp` plus
/// leeway, so a token is verified once and the channel's 304 fast path (``ChannelRevalidator``) serves it from
/// memory; at most ``ServerConfiguration/JWTSettings/cacheEntries`` are held (expired ones dropped first, then all).
final class JWTScopes: Sendable {
    struct Entry: Sendable {
        let outcome: ClaimPath.Outcome
        let validUntil: Date
    }

    let claim: ClaimPath
    let keys: JWKSKeys
    let settings: ServerConfiguration.JWTSettings
    /// By the token itself: a lookup hashes it with the dictionary's seeded SipHash, cheaper than the SHA-256 an opaque
    /// token's database lookup needs (measured in `scripts/bench jwt`). The tokens stay in this process's memory
    /// only, as the requests that carried them did.
    private let cache = Locked([String: Entry]())

    init(claim: ClaimPath, keys: JWKSKeys, settings: ServerConfiguration.JWTSettings) {
        self.claim = claim
        self.keys = keys
        self.settings = settings
    }

    /// The verified claims of `token`, or the refusal; see the type's documentation for the order of the checks.
    func verify(_ token: String) async throws -> (claims: ClaimValue, validUntil: Date) {
        let jwt: UnverifiedJWT
        do {
            jwt = try UnverifiedJWT(token)
        } catch {
            throw BearerRefusal.invalidToken(.malformed)
        }
        guard let algorithm = jwt.header.string("alg") else { throw BearerRefusal.invalidToken(.malformed) }
        guard algorithm.lowercased() != "none" else { throw BearerRefusal.invalidToken(.algorithmNone) }
        guard VerificationKey.acceptedAlgorithms.contains(algorithm) else {
            throw BearerRefusal.invalidToken(.algorithmRefused)
        }
        guard let kid = jwt.header.string("kid") else { throw BearerRefusal.invalidToken(.unknownKey) }
        let key: JWKSKeys.Key
        switch await keys.key(kid) {
        case .found(let found): key = found
        case .unknown: throw BearerRefusal.invalidToken(.unknownKey)
        case .unavailable:
            throw BearerRefusal.unavailable(
                "the identity provider's keys (JWKS) could not be loaded yet, so tokens cannot be checked; retry later")
        }
        guard key.algorithm == algorithm else { throw BearerRefusal.invalidToken(.algorithmMismatch) }
        switch await key.verifySignature(of: token) {
        case .valid: break
        case .badSignature: throw BearerRefusal.invalidToken(.badSignature)
        case .malformed: throw BearerRefusal.invalidToken(.malformed)
        }
        let claims = jwt.claims
        guard let expires = claims.date("exp") else { throw BearerRefusal.invalidToken(.noExpiry) }
        let now = Date()
        let leeway = Double(settings.leeway.components.seconds)
        let validUntil = expires.addingTimeInterval(leeway)
        guard now < validUntil else { throw BearerRefusal.invalidToken(.expired) }
        if let notBefore = claims.date("nbf"), now.addingTimeInterval(leeway) < notBefore {
            throw BearerRefusal.invalidToken(.notYetValid)
        }
        if let issuer = settings.issuer, claims.string("iss") != issuer {
            throw BearerRefusal.invalidToken(.wrongIssuer)
        }
        if let audience = settings.audience, !claims.strings("aud").contains(audience) {
            throw BearerRefusal.invalidToken(.wrongAudience)
        }
        return (claims, validUntil)
    }

    private func remember(_ token: String, _ entry: Entry) {
        let now = Date()
        cache.withLock { entries in
            if entries.count >= settings.cacheEntries {
                entries = entries.filter { $0.value.validUntil > now }
                if entries.count >= settings.cacheEntries { entries.removeAll(keepingCapacity: true) }
            }
            entries[token] = entry
        }
    }

    private func cached(_ token: String) -> Entry? {
        guard let hit = cache.withLock({ $0[token] }), hit.validUntil > Date() else { return nil }
        return hit
    }

    /// The answer for a claim outcome: the scope, or 403.
    private func scope(_ outcome: ClaimPath.Outcome, dataset: String) throws -> String {
        switch outcome {
        case .value(let scope): return scope
        case .missing:
            throw BearerRefusal.insufficientScope(dataset: dataset, description: "the token has no \(claim) claim")
        case .notScalar(let kind):
            throw BearerRefusal.insufficientScope(
                dataset: dataset, description: "the token's \(claim) claim is \(kind), not a string or an integer")
        }
    }
}

extension JWTScopes: TokenCheck {
    func checkedScope(forToken token: String, dataset: String, logger: Logger) async throws -> String {
        if let hit = cached(token) { return try scope(hit.outcome, dataset: dataset) }
        let (claims, validUntil) = try await verify(token)
        let outcome = claim.scopeValue(in: claims)
        remember(token, Entry(outcome: outcome, validUntil: validUntil))
        return try scope(outcome, dataset: dataset)
    }

    func freshScope(forToken token: String) -> String? {
        if case .value(let scope)? = cached(token)?.outcome { return scope }
        return nil
    }

    func expiry(ofToken token: String) -> Date? { cached(token)?.validUntil }

    func noSnapshot(dataset: String, scope: String) -> ServerError {
        BearerRefusal.insufficientScope(
            dataset: dataset, description: "the token's \(claim) claim names no scope this dataset has")
    }
}
