import Crypto
import FerryCore
import FerryPostgres
import Foundation
import JWTKit
import _CryptoExtras

/// An identity provider for the tests (issue 51): RS256, ES256 and EdDSA keys made by swift-crypto, tokens signed by jwt-kit,
/// and hand-made tokens of the kinds a server must refuse (`alg: none`, HS256 keyed with the RSA public key).
public struct TestIssuer: Sendable {
    public static let issuer = "https://idp.test/realms/ferry"
    public static let audience = "ferry"

    let rsaBacking: _RSA.Signing.PrivateKey
    let rsa2Backing: _RSA.Signing.PrivateKey
    let ec: ES256PrivateKey
    let ed: EdDSA.PrivateKey
    /// Signs with kids `rsa-1`, `rsa-2` (for rotation), `ec-1` and `ed-1`.
    public let signers: JWTKeyCollection
    /// A different RSA key that also calls itself `rsa-1`: its tokens have a bad signature.
    let impostor: JWTKeyCollection

    public static func make() async throws -> TestIssuer {
        let rsa = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let rsa2 = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let other = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let ec = ES256PrivateKey()
        let ed = try EdDSA.PrivateKey(curve: .ed25519)
        let signers = JWTKeyCollection()
        await signers.add(rsa: try Insecure.RSA.PrivateKey(backing: rsa), digestAlgorithm: .sha256, kid: "rsa-1")
        await signers.add(rsa: try Insecure.RSA.PrivateKey(backing: rsa2), digestAlgorithm: .sha256, kid: "rsa-2")
        await signers.add(ecdsa: ec, kid: "ec-1")
        await signers.add(eddsa: ed, kid: "ed-1")
        let impostor = JWTKeyCollection()
        await impostor.add(rsa: try Insecure.RSA.PrivateKey(backing: other), digestAlgorithm: .sha256, kid: "rsa-1")
        return TestIssuer(
            rsaBacking: rsa, rsa2Backing: rsa2, ec: ec, ed: ed, signers: signers, impostor: impostor)
    }

    /// The JWKS holding the public keys named (all but `rsa-2` by default), as the provider publishes it.
    public func jwks(_ kids: [String] = ["rsa-1", "ec-1", "ed-1"]) throws -> String {
        var keys: [[String: String]] = []
        for kid in kids {
            switch kid {
            case "rsa-1", "rsa-2":
                let key = try Insecure.RSA.PublicKey(
                    backing: (kid == "rsa-1" ? rsaBacking : rsa2Backing).publicKey)
                let (n, e) = try key.getKeyPrimitives()
                keys.append([
                    "kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": Self.base64URL(n),
                    "e": Self.base64URL(e),
                ])
            case "ec-1":
                let (x, y) = ec.publicKey.parameters!
                keys.append(["kty": "EC", "kid": kid, "crv": "P-256", "x": x, "y": y, "use": "sig"])
            case "ed-1":
                keys.append([
                    "kty": "OKP", "kid": kid, "crv": "Ed25519", "x": Self.base64URL(ed.publicKey.rawRepresentation),
                ])
            default: continue
            }
        }
        // An encryption key, as Keycloak publishes beside its signing keys: skipped.
        keys.append(["kty": "RSA", "kid": "enc-1", "use": "enc", "alg": "RSA-OAEP", "n": "AQAB", "e": "AQAB"])
        return String(decoding: try JSONSerialization.data(withJSONObject: ["keys": keys]), as: UTF8.self)
    }

    /// Standard claims: our issuer and audience, valid from a minute ago for `lifetime`, plus `extra`.
    public static func claims(team: String?, lifetime: TimeInterval = 300, extra: [String: ClaimValue] = [:])
        -> [String: ClaimValue]
    {
        let now = Date().timeIntervalSince1970
        var claims: [String: ClaimValue] = [
            "iss": .string(issuer), "aud": .array([.string(audience), .string("account")]),
            "sub": .string("user-1"), "iat": .int(Int64(now) - 60), "nbf": .int(Int64(now) - 60),
            "exp": .int(Int64(now + lifetime)),
        ]
        if let team { claims["realm_access"] = .object(["team": .string(team), "roles": .array([])]) }
        for (name, value) in extra { claims[name] = value }
        return claims
    }

    /// A token signed by the key `kid`.
    public func token(kid: String = "rsa-1", _ claims: [String: ClaimValue]) async throws -> String {
        try await signers.sign(Payload(members: claims), kid: JWKIdentifier(string: kid))
    }

    /// A token for `rsa-1` signed by another key.
    public func forged(_ claims: [String: ClaimValue]) async throws -> String {
        try await impostor.sign(Payload(members: claims), kid: "rsa-1")
    }

    /// `{"alg":"none"}` and no signature.
    public static func unsigned(_ claims: [String: ClaimValue]) throws -> String {
        try part(["alg": .string("none"), "kid": .string("rsa-1")]) + "." + part(claims) + "."
    }

    /// HS256 keyed with the RSA public key's PEM: the algorithm-confusion attack.
    public func confused(_ claims: [String: ClaimValue]) throws -> String {
        let input =
            try Self.part(["alg": .string("HS256"), "kid": .string("rsa-1"), "typ": .string("JWT")]) + "."
            + Self.part(claims)
        let key = SymmetricKey(data: Data(rsaBacking.publicKey.pemRepresentation.utf8))
        let mac = HMAC<SHA256>.authenticationCode(for: Data(input.utf8), using: key)
        return input + "." + Self.base64URL(Data(mac))
    }

    public static func part(_ members: [String: ClaimValue]) throws -> String {
        base64URL(try JSONEncoder().encode(members))
    }

    public static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    public struct Payload: JWTPayload {
        public var members: [String: ClaimValue]
        public init(members: [String: ClaimValue]) { self.members = members }
        public init(from decoder: any Decoder) throws {
            members = try decoder.singleValueContainer().decode([String: ClaimValue].self)
        }
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(members)
        }
        public func verify(using algorithm: some JWTAlgorithm) async throws {}
    }
}
