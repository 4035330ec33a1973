import Foundation

/// One public key of an identity provider's JWKS, able to check a token's signature. Each key takes exactly one
/// algorithm, so an RSA key can never check an HS256 or ES256 token (no algorithm confusion). Made by FerryJWT's
/// `JWKSDocument` (vapor/jwt-kit); the server uses it without linking jwt-kit's modules into its own.
public struct VerificationKey: Sendable {
    /// The key's `kid`.
    public let kid: String
    /// The one algorithm it checks: `RS256`, `ES256` or `EdDSA`.
    public let algorithm: String
    let check: @Sendable (String) async -> SignatureCheck

    /// A key whose `check` says whether a token's signature was made by it.
    public init(kid: String, algorithm: String, check: @escaping @Sendable (String) async -> SignatureCheck) {
        self.kid = kid
        self.algorithm = algorithm
        self.check = check
    }

    /// Whether `token`'s signature was made by this key (its header's `alg` must be ``algorithm``; the caller checks
    /// that first). Claims are not looked at.
    public func verifySignature(of token: String) async -> SignatureCheck { await check(token) }

    /// The `alg` values Ferry accepts.
    public static let acceptedAlgorithms: Set<String> = ["RS256", "ES256", "EdDSA"]
}

/// What a signature check found.
public enum SignatureCheck: Sendable, Equatable {
    case valid
    case badSignature
    case malformed
}

/// Reads a JWKS document into its usable keys by `kid`, reporting each key it skips (FerryJWT's
/// `JWKSDocument.keys(from:source:skipped:)`).
public typealias JWKSReader =
    @Sendable (_ document: Data, _ source: String, _ skipped: (String) -> Void) async throws -> [String:
    VerificationKey]
