import ArgumentParser
import AsyncHTTPClient
import FerryClient
import FerryClientNIO
import FerryCore
import Foundation
import NIOCore

/// `--token` and `--ca`, shared by `ferry fetch`, `push` and `sync`: how the client proves its access and which CA it
/// trusts for https://.
struct AccessOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "Access token for a scoped dataset, sent as 'Authorization: Bearer TOKEN' (default: $FERRY_TOKEN). Prefer FERRY_TOKEN: other users of the machine can see a command line.",
            valueName: "token"))
    var token: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Trust the CA certificates in this PEM file for https:// instead of the system's trust store (e.g. a private CA that signed the server's certificate).",
            valueName: "pem"))
    var ca: String?

    /// Hidden: for `scripts/bench fetch`, which measures both transports in one run.
    @Option(name: .long, help: .hidden)
    var transport: TransportChoice = .asyncHTTPClient

    @Option(
        name: .customLong("connect-timeout"),
        help: ArgumentHelp(
            "How long to wait for a connection to an unreachable host, e.g. 10s (the default; a refused connection is reported at once).",
            valueName: "duration"),
        transform: Duration.argument(
            in: .milliseconds(100) ... .seconds(3600), expected: "between 0.1 and 3600 seconds"))
    var connectTimeout: Duration = .seconds(10)

    @Option(
        name: .customLong("read-timeout"),
        help: ArgumentHelp(
            "How long to wait for a server that accepted the connection but sends nothing, e.g. 60s (the default).",
            valueName: "duration"),
        transform: Duration.argument(
            in: .milliseconds(100) ... .seconds(86_400), expected: "between 0.1 and 86400 seconds"))
    var readTimeout: Duration = .seconds(60)

    func validate() throws {
        if let token, token.isEmpty { throw ValidationError("--token must not be empty (omit it to send no token)") }
        _ = try trustedCertificates()
    }

    /// `--token`, else `FERRY_TOKEN` when set and not empty, else none.
    var resolvedToken: String? {
        if let token { return token }
        guard let fromEnvironment = ProcessInfo.processInfo.environment["FERRY_TOKEN"], !fromEnvironment.isEmpty else {
            return nil
        }
        return fromEnvironment
    }

    /// The `--ca` certificates; a missing or malformed file is a usage error naming it (exit status 2).
    func trustedCertificates() throws -> TrustedCertificates? {
        guard let ca else { return nil }
        do {
            return try TrustedCertificates(pemFile: URL(fileURLWithPath: ca))
        } catch let error as FerryError {
            throw ValidationError("--ca \(error)")
        }
    }

    /// An HTTP client with `--connect-timeout` and `--read-timeout` that trusts `--ca` when given; the caller shuts it
    /// down.
    /// `readTimeoutAtLeast` raises the read timeout (never lowers it): a long-poll's server sends nothing for its wait.
    func makeHTTPClient(readTimeoutAtLeast: Duration = .zero) throws -> HTTPClient {
        try AsyncHTTPClientTransport.makeHTTPClient(
            connectTimeout: TimeAmount(connectTimeout), readTimeout: TimeAmount(max(readTimeout, readTimeoutAtLeast)),
            trusting: try trustedCertificates())
    }

    /// Runs `body` with the command's HTTP stack (see ``ClientHTTP``) and shuts it down afterwards, either way.
    func withHTTPClient<T>(readTimeoutAtLeast: Duration = .zero, _ body: (ClientHTTP) async throws -> T) async throws
        -> T
    {
        let http = try makeHTTPClient(readTimeoutAtLeast: readTimeoutAtLeast)
        let result: T
        do {
            var access = self
            access.readTimeout = max(readTimeout, readTimeoutAtLeast)
            result = try await body(try ClientHTTP(transport, http: http, access: access))
        } catch {
            // The command's own error is the one to report; the process exits right after it either way.
            try? await http.shutdown()
            throw error
        }
        try await http.shutdown()
        return result
    }

    /// Sets the token on `configuration`.
    func apply(to configuration: inout FerryClient.Configuration) {
        configuration.setAccessToken(resolvedToken)
    }
}
