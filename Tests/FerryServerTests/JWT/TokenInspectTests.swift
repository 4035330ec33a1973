import FerryCore
import FerryTestSupport
import Foundation
import Testing

/// `ferry token inspect` (issue 51): the real binary on a real signed token and a template.
@Suite struct TokenInspectTests {
    @Test("prints the header, the claims, the expiry and the scope each template would give; refuses a non-JWT")
    func inspects() async throws {
        let directory = try TemporaryDirectory("ferry-token-inspect")
        defer { directory.remove() }
        let template = directory.appending("notes.yml")
        try """
        dataset: team-notes
        scope:
          values: [red, blue]
          claim: realm_access.team
        tables:
          - name: notes
            primaryKey: id
            filter: "team = :scope"
        """.write(to: template, atomically: true, encoding: .utf8)
        let issuer = try await TestIssuer.make()
        let token = try await issuer.token(kid: "ec-1", TestIssuer.claims(team: "red", lifetime: 600))
        let result = try await runFerry(["token", "inspect", token, "--config", template.path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains(#""alg" : "ES256""#) && result.stdout.contains(#""kid" : "ec-1""#))
        #expect(result.stdout.contains(#""iss" : "https://idp.test/realms/ferry""#))
        #expect(
            result.stdout.contains("expires: ")
                && (result.stdout.contains("(in 10m)") || result.stdout.contains("(in 9m ")))
        #expect(result.stdout.contains("dataset 'team-notes': scope 'red' (claim realm_access.team)"))
        let teamless = try await issuer.token(TestIssuer.claims(team: nil))
        let none = try await runFerry(["token", "inspect", teamless, "--config", template.path])
        #expect(none.stdout.contains("no scope, the token has no realm_access.team claim (403"))
        let opaque = try await runFerry(["token", "inspect", "alice-token"])
        #expect(opaque.status == 1 && opaque.stderr.contains("not a JWT"))
        #expect(!opaque.stderr.contains("alice-token"))
    }
}
