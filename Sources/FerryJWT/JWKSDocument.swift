import FerryCore
import FerryPostgres
import Foundation
internal import JWTKit

/// Reads a JWKS document (RFC 7517) into ``VerificationKey``s: the signing keys of RS256 (`kty: RSA`), ES256
/// (`kty: EC`, `crv: P-256`) and EdDSA (`kty: OKP`, `crv: Ed25519`) with a `kid`. Encryption keys (`use: enc`) and
/// other kinds are skipped, each reported to `skipped`.
///
/// ```swift
/// let keys = try await JWKSDocument.keys(from: data, source: url) { print("skipped: \($0)") }
/// jwt.readKeys = JWKSDocument.keys  // ServerConfiguration.JWTSettings
/// ```
public enum JWKSDocument {
    /// The usable keys of `data` by `kid` (a ``JWKSReader``); `source` names the document in errors.
    @Sendable
    public static func keys(from data: Data, source: String, skipped: (String) -> Void) async throws
        -> [String: VerificationKey]
    {
        struct Document: Decodable { let keys: [Entry] }
        struct Entry: Decodable {
            let jwk: JWK?
            let use: String?
            let kid: String?
            init(from decoder: any Decoder) throws {
                struct Fields: Decodable {
                    let use: String?
                    let kid: String?
                }
                // A key the JWKS may hold but Ferry cannot use (another kty) is skipped, not fatal.
                let fields = try? Fields(from: decoder)
                use = fields?.use
                kid = fields?.kid
                // As above: an unusable key is skipped.
                jwk = try? JWK(from: decoder)
            }
        }
        let document: Document
        do {
            document = try JSONDecoder().decode(Document.self, from: data)
        } catch {
            throw FerryError(.badInput, "not a JWKS: expected a JSON object with a `keys` array", path: source)
        }
        var keys: [String: VerificationKey] = [:]
        for entry in document.keys where entry.use != "enc" {
            guard let jwk = entry.jwk, let kid = entry.kid, let algorithm = algorithm(of: jwk) else {
                skipped("key '\(entry.kid ?? "-")' is not an RS256, ES256 or EdDSA signing key with a kid")
                continue
            }
            let collection = JWTKeyCollection()
            do {
                try await collection.add(jwk: jwk)
            } catch {
                skipped("key '\(kid)' cannot be used: \(error)")
                continue
            }
            keys[kid] = VerificationKey(kid: kid, algorithm: algorithm) { token in
                do {
                    _ = try await collection.verify(token, as: SignedPayload.self)
                    return .valid
                } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
                    return .badSignature
                } catch {
                    return .malformed
                }
            }
        }
        return keys
    }

    /// The one algorithm a JWK is used with; nil for a key of another kind or a declared `alg` Ferry refuses.
    static func algorithm(of jwk: JWK) -> String? {
        let algorithm: String
        switch (jwk.keyType, jwk.curve?.rawValue) {
        case (.rsa, nil): algorithm = "RS256"
        case (.ecdsa, "P-256"?): algorithm = "ES256"
        case (.octetKeyPair, "Ed25519"?): algorithm = "EdDSA"
        default: return nil
        }
        if let declared = jwk.algorithm, declared.rawValue != algorithm { return nil }
        return algorithm
    }
}

/// What jwt-kit decodes after checking the signature: nothing (the claims are read and checked by the server with
/// their exact meaning and error messages).
struct SignedPayload: JWTPayload {
    init() {}
    init(from decoder: any Decoder) throws {}
    func encode(to encoder: any Encoder) throws {}
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
