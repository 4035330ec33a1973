import FerryCore
import FerryJWT
import FerryPostgres
import FerryPublisher
import FerryStore
import FerryTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import FerryServer

/// JWT bearer tokens end to end (issue 51): a real PostgreSQL, the real publisher, the real server verifying tokens
/// signed by jwt-kit against a JWKS the test serves over HTTP. Dataset `team-notes` is scoped by the claim
/// `realm_access.team` (teams `red` and `blue`); `open-notes` is public.
@Suite("Server: JWT bearer tokens (JWKS, claims, RFC 6750 answers)")
struct JWTAccessTests {
    static let dataset = "team-notes"

    struct World: @unchecked Sendable {
        let database: TestDatabase
        let directory: TemporaryDirectory
        let issuer: TestIssuer
        var store: URL { directory.appending("store") }
        var templates: [URL] { [directory.appending("team-notes.yml"), directory.appending("open-notes.yml")] }

        static func make(_ label: String) async throws -> World {
            let database = try TestDatabase.create(label)
            try database.connect().execute(
                """
                CREATE TABLE notes (id text PRIMARY KEY, team text NOT NULL, body text NOT NULL,
                  created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
                INSERT INTO notes (id, team, body) VALUES ('n1', 'red', 'red secret'), ('n2', 'blue', 'blue secret');
                """)
            let directory = try TemporaryDirectory("ferry-\(label)")
            try """
            dataset: team-notes
            schemaVersion: 1
            scope:
              values: "SELECT DISTINCT team FROM notes"
              claim: realm_access.team
            tables:
              - name: notes
                source: notes
                filter: "team = :scope"
                writable: true
                merge: newest-wins
            """.write(to: directory.appending("team-notes.yml"), atomically: true, encoding: .utf8)
            try """
            dataset: open-notes
            schemaVersion: 1
            tables:
              - name: notes
                source: notes
            """.write(to: directory.appending("open-notes.yml"), atomically: true, encoding: .utf8)
            let world = World(database: database, directory: directory, issuer: try await TestIssuer.make())
            for template in world.templates {
                _ = try await Publisher(
                    configuration: .init(templatePath: template.path, databaseURL: database.url, store: world.store),
                    logger: Logger(label: "test")
                ).publish()
            }
            return world
        }

        func close() {
            database.drop()
            directory.remove()
        }

        func settings(_ jwks: String) -> ServerConfiguration.JWTSettings {
            var jwt = ServerConfiguration.JWTSettings(jwks: [jwks])
            jwt.issuer = TestIssuer.issuer
            jwt.audience = TestIssuer.audience
            jwt.leeway = .zero
            jwt.readKeys = JWKSDocument.keys
            jwt.refetchInterval = .seconds(1)
            jwt.retryInterval = .milliseconds(100)
            return jwt
        }

        /// The live server (port 0) over the store, with both templates and `jwt`.
        func withServer(
            _ jwt: ServerConfiguration.JWTSettings, _ body: @Sendable (any TestClientProtocol) async throws -> Void
        ) async throws {
            var logger = Logger(label: "test")
            logger.logLevel = .critical
            var configuration = ServerConfiguration(storePath: store, port: 0, pollInterval: .milliseconds(50))
            configuration.database = .init(templatePaths: templates, databaseURL: database.url)
            configuration.database?.jwt = jwt
            let app = try await buildApplication(configuration, logger: logger)
            try await app.test(.live) { client in try await body(client) }
        }

        func notes() throws -> [String] {
            try database.connect().run("SELECT id || ':' || body FROM notes ORDER BY id").compactMap { $0.first ?? nil }
        }
    }

    static func bearer(_ token: String) -> HTTPFields { [.authorization: "Bearer \(token)"] }

    /// `token` with its header replaced (its signature no longer matching).
    static func reheaded(_ token: String, _ header: [String: ClaimValue]) throws -> String {
        let parts = token.split(separator: ".")
        return try TestIssuer.part(header) + ".\(parts[1]).\(parts[2])"
    }

    @Test("a token of each algorithm reads its team's rows, never another's; 304 on revalidation; 403 for no team")
    func readsItsTeam() async throws {
        let world = try await World.make("jwt-read")
        defer { world.close() }
        let jwks = JWKSServer(try world.issuer.jwks())
        try await jwks.serve { url in
            try await world.withServer(world.settings(url)) { client in
                let base = "/v1/datasets/\(Self.dataset)"
                for (kid, team, other) in [("rsa-1", "red", "blue"), ("ec-1", "blue", "red"), ("ed-1", "red", "blue")] {
                    let token = try await world.issuer.token(kid: kid, TestIssuer.claims(team: team))
                    var etag = ""
                    try await client.execute(uri: "\(base)/snapshot", method: .get, headers: Self.bearer(token)) {
                        #expect($0.status == .ok, "\(kid)")
                        let body = $0.bodyString
                        #expect(body.contains("\(team) secret") && !body.contains("\(other) secret"), "\(kid)")
                        etag = $0.header("ETag") ?? ""
                    }
                    var conditional = Self.bearer(token)
                    conditional[.ifNoneMatch] = etag
                    try await client.execute(uri: "\(base)/snapshot", method: .get, headers: conditional) {
                        #expect($0.status == .notModified, "\(kid)")
                    }
                }
                // A valid token whose claim names no team of the dataset, or no team at all: 403.
                for claims in [TestIssuer.claims(team: "green"), TestIssuer.claims(team: nil)] {
                    let token = try await world.issuer.token(claims)
                    try await client.execute(uri: "\(base)/manifest", method: .get, headers: Self.bearer(token)) {
                        #expect($0.status == .forbidden)
                        #expect(
                            $0.header("WWW-Authenticate")?.hasPrefix(
                                #"Bearer realm="ferry", error="insufficient_scope""#) == true)
                    }
                }
                // The public dataset needs no token.
                try await client.execute(uri: "/v1/datasets/open-notes/manifest", method: .get) {
                    #expect($0.status == .ok)
                }
            }
        }
    }

    @Test("each bad token is 401 invalid_token with its own error_description; an upload with one writes nothing")
    func refusals() async throws {
        let world = try await World.make("jwt-refuse")
        defer { world.close() }
        let issuer = world.issuer
        let jwks = JWKSServer(try issuer.jwks())
        let now = Int64(Date().timeIntervalSince1970)
        let cases: [(String, String, BearerRefusal.Reason)] = [
            (
                "expired", try await issuer.token(TestIssuer.claims(team: "red", extra: ["exp": .int(now - 30)])),
                .expired
            ),
            (
                "not yet valid",
                try await issuer.token(TestIssuer.claims(team: "red", extra: ["nbf": .int(now + 120)])),
                .notYetValid
            ),
            (
                "wrong issuer",
                try await issuer.token(TestIssuer.claims(team: "red", extra: ["iss": .string("https://evil.test")])),
                .wrongIssuer
            ),
            (
                "wrong audience",
                try await issuer.token(TestIssuer.claims(team: "red", extra: ["aud": .string("another-app")])),
                .wrongAudience
            ),
            ("bad signature", try await issuer.forged(TestIssuer.claims(team: "red")), .badSignature),
            ("alg none", try TestIssuer.unsigned(TestIssuer.claims(team: "red")), .algorithmNone),
            ("HS256 keyed with the public key", try issuer.confused(TestIssuer.claims(team: "red")), .algorithmRefused),
            ("unknown kid", try await issuer.token(kid: "rsa-2", TestIssuer.claims(team: "red")), .unknownKey),
            (
                "ES256 naming the RSA key",
                try Self.reheaded(
                    try await issuer.token(kid: "ec-1", TestIssuer.claims(team: "red")),
                    ["alg": .string("ES256"), "kid": .string("rsa-1")]), .algorithmMismatch
            ),
            ("malformed", "eyJhbGciOiJSUzI1NiJ9.not-json.c2ln", .malformed),
            ("no exp", try await issuer.token(TestIssuer.claims(team: "red", extra: ["exp": .null])), .noExpiry),
        ]
        #expect(Set(cases.map(\.2.rawValue)).count == cases.count)
        try await jwks.serve { url in
            try await world.withServer(world.settings(url)) { client in
                let base = "/v1/datasets/\(Self.dataset)"
                let batch = ByteBuffer(
                    bytes: try JSONEncoder().encode(
                        ChangeBatch(
                            clientId: "phone", sentAt: Timestamp.format(Date()),
                            changes: [
                                Change(
                                    id: "c1", table: "notes", op: .update, key: ["id": .string("n1")],
                                    values: ["body": .string("overwritten")], editedAt: Timestamp.format(Date()),
                                    baseUpdatedAt: nil)
                            ])))
                for (name, token, reason) in cases {
                    let attachment = "\(base)/attachments/" + String(repeating: "0", count: 64)
                    for (uri, method) in [
                        ("\(base)/manifest", HTTPRequest.Method.get), ("\(base)/changes", .post), (attachment, .get),
                    ] {
                        try await client.execute(
                            uri: uri, method: method, headers: Self.bearer(token), body: method == .post ? batch : nil
                        ) { response in
                            #expect(response.status == .unauthorized, "\(name) \(method)")
                            #expect(
                                response.header("WWW-Authenticate")
                                    == #"Bearer realm="ferry", error="invalid_token", error_description=""#
                                    + reason.rawValue + #"""#, "\(name)")
                            #expect(response.bodyString.contains(#""code":"unauthorized""#), "\(name)")
                            #expect(!response.bodyString.contains(token), "\(name)")
                        }
                    }
                }
                // A good token writes (proving the refusals above were the token's doing).
                let good = try await issuer.token(TestIssuer.claims(team: "red"))
                #expect(try world.notes() == ["n1:red secret", "n2:blue secret"])
                try await client.execute(uri: "\(base)/changes", method: .post, headers: Self.bearer(good), body: batch)
                {
                    #expect($0.status == .ok)
                }
                #expect(try world.notes() == ["n1:overwritten", "n2:blue secret"])
            }
        }
    }

    @Test("a new key in the JWKS is taken without a restart; 1,000 made-up kids make at most a few fetches")
    func rotation() async throws {
        let world = try await World.make("jwt-rotate")
        defer { world.close() }
        let jwks = JWKSServer(try world.issuer.jwks())
        try await jwks.serve { url in
            try await world.withServer(world.settings(url)) { client in
                #expect(jwks.requests.withLock { $0 } == 1)
                let manifest = "/v1/datasets/\(Self.dataset)/manifest"
                let before = jwks.requests.withLock { $0 }
                let start = ContinuousClock.now
                let parts = try await world.issuer.token(TestIssuer.claims(team: "red")).split(separator: ".")
                for i in 0..<1_000 {
                    // A header naming a kid nobody has.
                    let header = try TestIssuer.part(["alg": .string("RS256"), "kid": .string("made-up-\(i)")])
                    try await client.execute(
                        uri: manifest, method: .get, headers: Self.bearer("\(header).\(parts[1]).\(parts[2])")
                    ) { #expect($0.status == .unauthorized) }
                }
                let elapsed = ContinuousClock.now - start
                let fetches = jwks.requests.withLock { $0 } - before
                // One fetch per refetch interval (1 s here) at most.
                #expect(fetches <= Int(elapsed.components.seconds) + 2, "\(fetches) fetches in \(elapsed)")

                // Rotation: the provider starts signing with rsa-2 and publishes it.
                let rotated = try await world.issuer.token(kid: "rsa-2", TestIssuer.claims(team: "red"))
                jwks.document.withLock { $0 = try? world.issuer.jwks(["rsa-2", "ec-1"]) }
                let deadline = ContinuousClock.now + .seconds(10)
                var status = HTTPResponse.Status.unauthorized
                while status != .ok, ContinuousClock.now < deadline {
                    try await client.execute(uri: manifest, method: .get, headers: Self.bearer(rotated)) {
                        status = $0.status
                    }
                    if status != .ok { try await Task.sleep(for: .milliseconds(100)) }
                }
                #expect(status == .ok)
            }
        }
    }

    @Test("the provider unreachable at start: 503 with Retry-After for JWT routes, public served; then it loads")
    func unreachableAtStart() async throws {
        let world = try await World.make("jwt-down")
        defer { world.close() }
        let jwks = JWKSServer(nil)
        try await jwks.serve { url in
            try await world.withServer(world.settings(url)) { client in
                let token = try await world.issuer.token(TestIssuer.claims(team: "blue"))
                let manifest = "/v1/datasets/\(Self.dataset)/manifest"
                try await client.execute(uri: manifest, method: .get, headers: Self.bearer(token)) {
                    #expect($0.status == .serviceUnavailable)
                    #expect($0.header("Retry-After") != nil)
                }
                try await client.execute(uri: "/v1/datasets/open-notes/snapshot", method: .get) {
                    #expect($0.status == .ok && $0.bodyString.contains("blue secret"))
                }
                jwks.document.withLock { $0 = try? world.issuer.jwks() }
                let deadline = ContinuousClock.now + .seconds(10)
                var status = HTTPResponse.Status.serviceUnavailable
                while status != .ok, ContinuousClock.now < deadline {
                    try await client.execute(uri: manifest, method: .get, headers: Self.bearer(token)) {
                        status = $0.status
                    }
                    if status != .ok { try await Task.sleep(for: .milliseconds(100)) }
                }
                #expect(status == .ok)
            }
        }
    }

    @Test("a long-poll whose token expires during the wait ends with 401 expired")
    func longPollExpiry() async throws {
        let world = try await World.make("jwt-poll")
        defer { world.close() }
        let jwks = JWKSServer(try world.issuer.jwks())
        try await jwks.serve { url in
            try await world.withServer(world.settings(url)) { client in
                let token = try await world.issuer.token(TestIssuer.claims(team: "red", lifetime: 2))
                let manifest = "/v1/datasets/\(Self.dataset)/manifest"
                var headers = Self.bearer(token)
                try await client.execute(uri: manifest, method: .get, headers: headers) {
                    headers[.ifNoneMatch] = $0.header("ETag") ?? ""
                }
                headers[HTTPField.Name("Prefer")!] = "wait=20"
                let start = ContinuousClock.now
                try await client.execute(uri: manifest, method: .get, headers: headers) {
                    #expect($0.status == .unauthorized)
                    #expect(
                        $0.header("WWW-Authenticate")?.contains("error_description=\"the token has expired\"") == true)
                }
                #expect(ContinuousClock.now - start < .seconds(10))
            }
        }
    }
}
