import FerryCore

/// The `Authorization: Bearer <token>` header of snapshot requests and change uploads, and the error for a server
/// that refuses the token. The token itself never goes into an error, a log line or a file.
package enum BearerAuthorization {
    /// The header value for `token`, nil for no token (nil or empty). Refuses a token that cannot travel in a header
    /// (spaces, control characters, non-ASCII), without quoting it.
    package static func header(for token: String?) throws -> String? {
        guard let token, !token.isEmpty else { return nil }
        guard token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw FerryError(
                .badInput,
                "the access token holds a space, a control or a non-ASCII character, so it cannot be sent as 'Authorization: Bearer'; check where the token comes from",
                key: "Authorization")
        }
        return "Bearer \(token)"
    }

    /// The headers every request of a client carries, set here only: `Ferry-Device` (the directory's id) and, when
    /// `provider` gives a token, `Authorization` (asked on every request, so a refreshed token is used at once).
    static func commonHeaders(device: String?, provider: FerryClient.TokenProvider?) async throws -> [String: String] {
        var headers: [String: String] = [:]
        if let device {
            headers[FerryClient.deviceHeader] = device
            headers[FerryClient.clientHeader.0] = FerryClient.clientHeader.1
        }
        if let provider, let authorization = try header(for: try await provider()) {
            headers["Authorization"] = authorization
        }
        return headers
    }

    /// The error for a 401 or 403: typed, so an app can catch it and sign in again. Nothing local is touched and
    /// nothing is retried with the same token.
    package static func refusal(status: Int, url: String) -> FerryError {
        if status == 403 {
            return FerryError(
                .unauthorized,
                "the server refused this access token for \(url) (403): it does not grant this dataset; sign in with an account that has access and retry; local data and queued edits are kept"
            )
        }
        return FerryError(
            .unauthorized,
            "the server refused the access token (401): re-authenticate (get a new token) and retry; local data and queued edits are kept"
        )
    }
}
