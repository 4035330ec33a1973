import FerryPostgres
import Foundation

extension ServerConfiguration {
    /// How the server verifies JWT bearer tokens (`ferry serve --jwks … --jwt-issuer … --jwt-audience …`): the
    /// identity provider's public keys, and the claims every token must carry. Datasets whose template says
    /// `scope: {claim: …}` take their scope from a token verified this way (docs/access-rights.md).
    ///
    /// ```swift
    /// var jwt = ServerConfiguration.JWTSettings(jwks: ["https://sso.example.com/realms/app/protocol/openid-connect/certs"])
    /// jwt.issuer = "https://sso.example.com/realms/app"
    /// jwt.audience = "ferry"
    /// jwt.readKeys = JWKSDocument.keys  // FerryJWT
    /// configuration.database?.jwt = jwt
    /// ```
    public struct JWTSettings: Sendable {
        /// Where the JWKS comes from: `http(s)://` URLs or files; the keys of all of them are accepted.
        public var jwks: [String]
        /// The `iss` every token must carry; nil: any.
        public var issuer: String?
        /// A value the token's `aud` (a string or an array) must contain; nil: any.
        public var audience: String?
        /// Clock skew allowed on `exp` and `nbf`. Default 60 s.
        public var leeway: Duration = .seconds(60)
        /// The shortest time between two fetches of the JWKS for an unknown `kid`. Default 30 s.
        public var refetchInterval: Duration = .seconds(30)
        /// How often the JWKS is fetched again while it cannot be had (at start), and then to pick up removed keys.
        /// Default 5 s while missing; 15 minutes once loaded.
        public var retryInterval: Duration = .seconds(5)
        public var refreshInterval: Duration = .seconds(900)
        /// Verified tokens whose scope is remembered until their `exp` (expired ones dropped first, then all).
        public var cacheEntries = 10_000
        /// Reads a JWKS into keys that check signatures: FerryJWT's `JWKSDocument.keys` (vapor/jwt-kit).
        /// ``FerryService``'s assembly and `ferry serve` set it; kept out of FerryServer so jwt-kit's modules stay
        /// out of its files.
        public var readKeys: JWKSReader? = nil

        public init(jwks: [String]) {
            self.jwks = jwks
        }
    }
}
