import ArgumentParser
import FerryClient
import FerryCore
import Foundation

/// `--token`, shared by `ferry fetch`, `push` and `sync`: how the client proves its access.
struct AccessOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "Access token for a scoped dataset, sent as 'Authorization: Bearer TOKEN' (default: $FERRY_TOKEN). Prefer FERRY_TOKEN: other users of the machine can see a command line.",
            valueName: "token"))
    var token: String?

    func validate() throws {
        if let token, token.isEmpty { throw ValidationError("--token must not be empty (omit it to send no token)") }
    }

    /// `--token`, else `FERRY_TOKEN` when set and not empty, else none.
    var resolvedToken: String? {
        if let token { return token }
        guard let fromEnvironment = ProcessInfo.processInfo.environment["FERRY_TOKEN"], !fromEnvironment.isEmpty else { return nil }
        return fromEnvironment
    }

    /// Sets the token on `configuration`.
    func apply(to configuration: inout FerryClient.Configuration) {
        configuration.setAccessToken(resolvedToken)
    }
}
