import ArgumentParser
import FerryJWT
import FerryServer
import Foundation

/// `ferry serve --jwks … --jwt-issuer … --jwt-audience … --jwt-leeway …`: JWT bearer tokens from an identity
/// provider, for templates whose `scope:` names a `claim:` (docs/access-rights.md).
struct JWTOptions: ParsableArguments {
    @Option(
        name: .customLong("jwks"),
        help: ArgumentHelp(
            "The identity provider's public keys (a JWKS): an http(s):// URL or a file; repeat for several. Templates with `scope: {claim: …}` take their scope from a JWT verified against these.",
            valueName: "url|file"))
    var jwks: [String] = []

    @Option(
        name: .customLong("jwt-issuer"),
        help: ArgumentHelp("The `iss` every JWT must carry (e.g. the Keycloak realm's URL).", valueName: "issuer"))
    var issuer: String?

    @Option(
        name: .customLong("jwt-audience"),
        help: ArgumentHelp("A value every JWT's `aud` must contain (e.g. the client id).", valueName: "audience"))
    var audience: String?

    @Option(
        name: .customLong("jwt-leeway"),
        help: ArgumentHelp(
            "Clock skew allowed on a JWT's exp and nbf, e.g. 60s (the default; 0 to 10m).", valueName: "duration"),
        transform: Duration.argument(in: .zero ... .seconds(600), expected: "0 to 600 seconds"))
    var leeway: Duration = .seconds(60)

    func validate() throws {
        guard jwks.isEmpty else { return }
        for (flag, given) in [("--jwt-issuer", issuer != nil), ("--jwt-audience", audience != nil)] where given {
            throw ValidationError("\(flag) needs --jwks (the identity provider's keys)")
        }
    }

    /// The settings, or nil without `--jwks`.
    var settings: ServerConfiguration.JWTSettings? {
        guard !jwks.isEmpty else { return nil }
        var settings = ServerConfiguration.JWTSettings(jwks: jwks)
        settings.issuer = issuer
        settings.audience = audience
        settings.leeway = leeway
        settings.readKeys = JWKSDocument.keys
        return settings
    }
}
