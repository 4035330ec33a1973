import FerryClient
import FerryCore
import FerryGRDB
import FerryJWT
import FerryPostgres
import FerryPublisher
import FerryServer
import FerryTestSupport
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

/// A device whose JWT expires while it is offline (issue 51): real keys, a real server verifying against the JWKS,
/// a real PostgreSQL, a real client directory. Its edits and photos stay queued, every call fails with
/// `unauthorized` at once (the token provider is asked once per call: no retry loop), nothing reaches PostgreSQL,
/// and a fresh token pushes each edit exactly once and updates by patch.
@Suite struct JWTExpiryTests {
    /// Counts how often the client asks for its token.
    actor Provider {
        private(set) var token: String
        private(set) var asked = 0
        init(_ token: String) { self.token = token }
        func set(_ token: String) { self.token = token }
        func next() -> String {
            asked += 1
            return token
        }
    }

    /// The server side: PostgreSQL, the published store, the issuer and its JWKS (a file), the live server.
    struct World: @unchecked Sendable {
        let database: TestDatabase
        let directory: TemporaryDirectory
        let issuer: TestIssuer
        let publisher: Publisher
        let url: URL

        func rows() throws -> [String] {
            try database.connect().run("SELECT id || ':' || body FROM notes ORDER BY id").compactMap { $0.first ?? nil }
        }

        func configuration(_ name: String, _ provider: Provider) -> FerryClient.Configuration {
            var settings = FerryClient.Configuration(
                directory: directory.appending(name), serverURL: url, dataset: "team-notes")
            settings.tokenProvider = { await provider.next() }
            settings.push.backoff = .milliseconds(10)
            settings.push.onOpen = false
            return settings
        }
    }

    func withWorld(_ label: String, _ body: @Sendable (World) async throws -> Void) async throws {
        let database = try TestDatabase.create(label)
        let directory = try TemporaryDirectory("ferry-\(label)")
        defer {
            database.drop()
            directory.remove()
        }
        try database.connect().execute(
            """
            CREATE TABLE notes (id text PRIMARY KEY, team text NOT NULL, body text NOT NULL,
              created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
            INSERT INTO notes (id, team, body) VALUES ('n1', 'red', 'one'), ('n2', 'blue', 'two'), ('n3', 'red', 'three');
            """)
        let template = directory.appending("team-notes.yml")
        try """
        dataset: team-notes
        scope:
          values: "SELECT DISTINCT team FROM notes"
          claim: realm_access.team
        tables:
          - name: notes
            source: notes
            filter: "team = :scope"
            writable: true
            merge: newest-wins
        """.write(to: template, atomically: true, encoding: .utf8)
        let store = directory.appending("store")
        let publisher = Publisher(
            configuration: .init(templatePath: template.path, databaseURL: database.url, store: store), logger: .test)
        _ = try await publisher.publish()
        let issuer = try await TestIssuer.make()
        let jwks = directory.appending("jwks.json")
        try issuer.jwks().write(to: jwks, atomically: true, encoding: .utf8)

        var configuration = ServerConfiguration(storePath: store, port: 0, pollInterval: .milliseconds(50))
        configuration.database = .init(templatePaths: [template], databaseURL: database.url)
        var jwt = ServerConfiguration.JWTSettings(jwks: [jwks.path])
        jwt.issuer = TestIssuer.issuer
        jwt.audience = TestIssuer.audience
        jwt.leeway = .zero
        jwt.readKeys = JWKSDocument.keys
        configuration.database?.jwt = jwt
        let app = try await buildApplication(configuration, logger: .test)
        try await app.test(.live) { server in
            try await body(
                World(
                    database: database, directory: directory, issuer: issuer, publisher: publisher,
                    url: URL(string: "http://127.0.0.1:\(server.port!)")!))
        }
    }

    @Test("a token expired offline: edits and photos kept, unauthorized without retries, a new token pushes once")
    func expiresOffline() async throws {
        try await withWorld("jwt-expiry") { world in
            let issuer = world.issuer
            let publisher = world.publisher
            let provider = Provider(try await issuer.token(TestIssuer.claims(team: "red")))
            let client = try await FerryClient.open(
                configuration: world.configuration("device", provider), logger: .test)
            #expect(try await client.checkForUpdates().outcome == .initialSync)
            #expect(try await client.status().version == 1)
            // The token the device holds when it goes offline lives 3 s from here, however long the sync took on a
            // loaded machine.
            let lifetime: TimeInterval = 3
            await provider.set(try await issuer.token(TestIssuer.claims(team: "red", lifetime: lifetime)))
            let expiry = Date().addingTimeInterval(lifetime)

            // Offline: an edit and a photo, then the token expires; another edit after it expired.
            _ = try await client.execute("UPDATE notes SET body = 'one, edited offline' WHERE id = 'n1'")
            _ = try await client.addAttachment(data: Data("a photo".utf8), contentType: "image/jpeg")
            while Date() < expiry.addingTimeInterval(1) { try await Task.sleep(for: .milliseconds(200)) }
            _ = try await client.execute("UPDATE notes SET body = 'three, edited after expiry' WHERE id = 'n3'")
            #expect(try await client.pendingEdits() == 2)

            // Back online with the expired token: each call fails at once, asking for the token once.
            for name in ["push", "fetch", "sync"] {
                let before = await provider.asked
                do {
                    switch name {
                    case "push": _ = try await client.push()
                    case "fetch": _ = try await client.checkForUpdates()
                    default: _ = try await client.sync()
                    }
                    Issue.record("\(name) succeeded with an expired token")
                } catch let error as FerryError {
                    #expect(error.code == .unauthorized, "\(name)")
                    #expect(error.message.contains("get a new token"), "\(name): \(error.message)")
                }
                #expect(await provider.asked - before == 1, "\(name) asked for the token more than once")
            }
            #expect(try await client.pendingEdits() == 2)
            #expect(try await client.pendingAttachments().count == 1)
            let local = try await client.withDatabase { db in
                try db.query("SELECT body FROM notes ORDER BY id").map { $0[0].text ?? "" }
            }
            #expect(local == ["one, edited offline", "three, edited after expiry"])
            let rows = { try world.rows() }
            #expect(try rows() == ["n1:one", "n2:two", "n3:three"])

            // A fresh token: every queued edit goes up exactly once, and the next fetch is a patch.
            await provider.set(try await issuer.token(TestIssuer.claims(team: "red")))
            let pushed = try await client.push()
            #expect(pushed.summary.applied == 2 && pushed.remaining == 0)
            #expect(try await client.push().sent == 0)
            #expect(try world.rows() == ["n1:one, edited offline", "n2:two", "n3:three, edited after expiry"])
            let answers = try world.database.connect().run("SELECT count(*), count(DISTINCT id) FROM ferry_changes")
            #expect(answers.first == ["2", "2"])
            _ = try await publisher.publish()
            var outcome = try await client.checkForUpdates()
            for _ in 0..<50 where outcome.outcome == .notModified {
                try await Task.sleep(for: .milliseconds(100))  // the catalog polls the store every 50 ms
                outcome = try await client.checkForUpdates()
            }
            #expect(outcome.outcome == .updateDownloaded && outcome.download?.path.name == "patch")
            await client.close()
        }
    }

    @Test("FerryGRDB's SyncStatus says the token was refused, and clears it after a sync with a new token")
    func statusSaysRefused() async throws {
        try await withWorld("jwt-status") { world in
            let provider = Provider(try await world.issuer.token(TestIssuer.claims(team: "red")))
            let ferry = try await FerryDatabase.open(
                configuration: world.configuration("app", provider), applyMode: .automatic, logger: .test)
            _ = try await ferry.checkForUpdates()
            #expect(ferry.currentStatus.tokenRefused == false && ferry.currentStatus.version == 1)
            let now = Int64(Date().timeIntervalSince1970)
            await provider.set(
                try await world.issuer.token(TestIssuer.claims(team: "red", extra: ["exp": .int(now - 5)])))
            await #expect(throws: FerryError.self) { try await ferry.checkForUpdates() }
            #expect(ferry.currentStatus.tokenRefused && ferry.currentStatus.lastError?.code == .unauthorized)
            #expect(ferry.currentStatus.version == 1)
            await provider.set(try await world.issuer.token(TestIssuer.claims(team: "red")))
            _ = try await ferry.checkForUpdates()
            #expect(ferry.currentStatus.tokenRefused == false)
            try await ferry.close()
        }
    }
}
