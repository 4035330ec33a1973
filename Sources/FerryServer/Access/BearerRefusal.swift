import HTTPTypes
import Hummingbird

/// The answers of RFC 6750 §3 to a bearer token the server will not take: 401 `invalid_token` and 403
/// `insufficient_scope`, each with a `WWW-Authenticate: Bearer realm="ferry", error="…", error_description="…"` and
/// Ferry's JSON error body. The description tells the cases apart (expired, bad signature, wrong issuer, …) and
/// never quotes the token.
///
/// ```swift
/// throw BearerRefusal.invalidToken(.expired)
/// ```
public enum BearerRefusal {
    /// Why a token was refused; its raw value is the `error_description` (RFC 6750 allows no `"` or `\` there).
    public enum Reason: String, Sendable, CaseIterable {
        case expired = "the token has expired"
        case notYetValid = "the token is not valid yet (nbf)"
        case badSignature = "the token's signature does not verify"
        case wrongIssuer = "the token's issuer (iss) is not accepted"
        case wrongAudience = "the token's audience (aud) is not accepted"
        case unknownKey = "the token's key (kid) is not in the JWKS"
        case malformed = "the token is malformed"
        case algorithmNone = "unsigned tokens (alg none) are refused"
        case algorithmRefused = "the token's algorithm is not accepted"
        case algorithmMismatch = "the token's algorithm does not match its key"
        case noExpiry = "the token has no expiry (exp)"
        case unknown = "the token is unknown or revoked"

        /// The JSON body's message: the description, and what the user does about it.
        var message: String {
            switch self {
            case .expired: "the access token has expired; get a new token (sign in again)"
            case .notYetValid:
                "the access token is not valid yet (its nbf is in the future); check the device's clock or get a new token"
            case .unknown: "the access token is not valid (unknown or revoked); re-authenticate"
            case .malformed: "the access token is malformed; re-authenticate"
            default: "\(rawValue); get a new token from the identity provider (sign in again)"
            }
        }
    }

    /// 401 `invalid_token`.
    public static func invalidToken(_ reason: Reason) -> ServerError {
        ServerError(
            .unauthorized, code: "unauthorized", reason.message,
            headers: [
                .wwwAuthenticate: #"Bearer realm="ferry", error="invalid_token", error_description=""#
                    + reason.rawValue + #"""#
            ])
    }

    /// 403 `insufficient_scope`: a valid token that names no scope the dataset has.
    public static func insufficientScope(dataset: String, description: String) -> ServerError {
        ServerError(
            .forbidden, code: "forbidden",
            "the access token gives no access to dataset '\(dataset)': \(description); ask for access, or sign in as another user",
            headers: [
                .wwwAuthenticate: #"Bearer realm="ferry", error="insufficient_scope", error_description=""#
                    + description.filter { $0 != "\"" && $0 != "\\" && $0.isASCII } + #"""#
            ])
    }

    /// 503 with `Retry-After`: the token cannot be checked now (the JWKS is not loaded, PostgreSQL is down).
    static func unavailable(_ message: String, retryAfter seconds: Int = 5) -> ServerError {
        ServerError(.serviceUnavailable, code: "unavailable", message, headers: [.retryAfter: String(seconds)])
    }
}
