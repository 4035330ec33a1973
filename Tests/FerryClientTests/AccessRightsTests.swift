import FerryClient
import FerryCore
import FerryMerge
import FerryPostgres
import FerryPublisher
import FerryServer
import FerryStore
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

/// The book's access-rights scenarios as executable tests: the sample campgrounds in a real PostgreSQL, published
/// per access tier by the real publisher, served by the real server with the template's token query, fetched by
/// real client directories. Alice's token is 'alice-token' (tier 0), Bob's 'bob-token' (tier 2).
@Suite struct AccessRightsTests {
    static let dataset = "campgrounds-tiered"
    static let premium = "0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e02"  // tier 1, one review (3), one photo
    static let fjall = "0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e04"  // tier 2, one review (5), one photo
    static let pine = "0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e01"  // tier 0, reviews 1 and 2, one photo

    struct World: Sendable {
        let database: TestDatabase
        let directory: TemporaryDirectory
        let templatePath: String
        let server: URL
        let waitForPublish: @Sendable (String) async throws -> Void
        var store: URL { directory.appending("store") }

        func publish() async throws -> PublishResult {
            try await Publisher(
                configuration: .init(templatePath: templatePath, databaseURL: database.url, store: store), logger: .test
            ).publish()
        }

        func execute(_ sql: String) throws { try database.connect().execute(sql) }

        func client(_ name: String, token: String?) async throws -> FerryClient {
            var configuration = FerryClient.Configuration(
                directory: directory.appending(name), serverURL: server, dataset: AccessRightsTests.dataset)
            configuration.setAccessToken(token)
            configuration.push.backoff = .milliseconds(10)
            configuration.push.onOpen = false
            return try await FerryClient.open(configuration: configuration, logger: .test)
        }

        /// Publishes, then waits for the server to pick it up and for the token cache window to pass.
        func publishAndWait() async throws {
            let result = try await publish()
            try await waitForPublish(result.createdAt)
        }
    }

    static let ttl: Duration = .milliseconds(300)

    func withWorld(_ body: @Sendable @escaping (World) async throws -> Void) async throws {
        let database = try TestDatabase.create("access")
        let directory = try TemporaryDirectory("access-e2e")
        defer {
            database.drop()
            directory.remove()
        }
        let root = TestPaths.packageRoot
        try database.connect().execute(
            try String(contentsOf: root.appendingPathComponent("templates/campgrounds.pg.sql"), encoding: .utf8))
        let templatePath = root.appendingPathComponent("templates/campgrounds-tiered.yml").path
        let template = try Template.load(path: templatePath)
        let store = directory.appending("store")
        _ = try await Publisher(
            configuration: .init(templatePath: templatePath, databaseURL: database.url, store: store), logger: .test
        ).publish()

        var configuration = ServerConfiguration(storePath: store, port: 0)
        configuration.pollInterval = .milliseconds(50)
        configuration.tokenCacheTTL = Self.ttl
        configuration.database = .init(templatePaths: [URL(fileURLWithPath: template.path)], databaseURL: database.url)
        let app = try await buildApplication(configuration, logger: .test)
        try await app.test(.live) { client in
            let url = URL(string: "http://127.0.0.1:\(client.port!)")!
            let wait: @Sendable (String) async throws -> Void = { createdAt in
                let manifest = FileSnapshotStore(root: store).manifestURL(dataset: Self.dataset)
                for _ in 0..<100 {
                    // The catalog polls every 50 ms; the token cache forgets after `ttl`.
                    if let data = FileManager.default.contents(atPath: manifest.path),
                        String(decoding: data, as: UTF8.self).contains(createdAt)
                    {
                        break
                    }
                    try await Task.sleep(for: .milliseconds(20))
                }
                try await Task.sleep(for: Self.ttl + .milliseconds(250))
            }
            try await body(
                World(
                    database: database, directory: directory, templatePath: templatePath, server: url,
                    waitForPublish: wait))
        }
    }

    static func campgrounds(_ client: FerryClient) async throws -> [String] {
        try await client.withDatabase { db in
            try db.query("SELECT id FROM campgrounds ORDER BY id").map { $0[0].text ?? "" }
        }
    }

    static func count(_ client: FerryClient, _ sql: String) async throws -> Int64 {
        try await client.withDatabase { db in try db.scalar(sql)?.integer ?? -1 }
    }

    @Test("free-tier Alice does not get premium campgrounds, nor their reviews and photos; Bob does")
    func freeTier() async throws {
        try await withWorld { world in
            let alice = try await world.client("alice", token: "alice-token")
            let bob = try await world.client("bob", token: "bob-token")
            #expect(try await alice.checkForUpdates().outcome == .initialSync)
            #expect(try await bob.checkForUpdates().outcome == .initialSync)
            let aliceSees = try await Self.campgrounds(alice)
            #expect(aliceSees.count == 3 && !aliceSees.contains(Self.premium) && !aliceSees.contains(Self.fjall))
            #expect(
                try await Self.count(
                    alice, "SELECT count(*) FROM reviews WHERE campground_id IN ('\(Self.premium)', '\(Self.fjall)')")
                    == 0)
            #expect(
                try await Self.count(
                    alice, "SELECT count(*) FROM photos WHERE campground_id IN ('\(Self.premium)', '\(Self.fjall)')")
                    == 0)
            #expect(try await Self.count(alice, "SELECT count(*) FROM reviews") == 4)
            #expect(try await Self.campgrounds(bob).count == 5)
            #expect(try await Self.count(bob, "SELECT count(*) FROM reviews") == 6)
            await alice.close()
            await bob.close()
        }
    }

    @Test(
        "Alice upgrades: the next fetch brings the premium campgrounds, reviews and photos included; a downgrade removes them"
    )
    func upgradeThenDowngrade() async throws {
        try await withWorld { world in
            let alice = try await world.client("alice", token: "alice-token")
            _ = try await alice.checkForUpdates()
            #expect(try await Self.campgrounds(alice).count == 3)

            // The upgrade: a grant is just another snapshot. The premium campground did not change, yet arrives.
            try world.execute("UPDATE users SET access_tier = 2 WHERE id = 'alice'")
            try await world.publishAndWait()
            #expect(try await alice.checkForUpdates().outcome == .updateDownloaded)
            #expect(try await alice.applyPendingUpdate().applied)
            #expect(try await Self.campgrounds(alice).count == 5)
            #expect(
                try await Self.count(alice, "SELECT count(*) FROM reviews WHERE campground_id = '\(Self.premium)'") == 1
            )
            #expect(
                try await Self.count(alice, "SELECT count(*) FROM photos WHERE campground_id = '\(Self.premium)'") == 1)
            #expect(try await Self.count(alice, "SELECT count(*) FROM reviews") == 6)

            // The downgrade: the next fetch and apply remove them from her device.
            try world.execute("UPDATE users SET access_tier = 0 WHERE id = 'alice'")
            try await world.publishAndWait()
            #expect(try await alice.checkForUpdates().outcome == .updateDownloaded)
            #expect(try await alice.applyPendingUpdate().applied)
            #expect(try await Self.campgrounds(alice).count == 3)
            #expect(try await Self.count(alice, "SELECT count(*) FROM reviews") == 4)
            #expect(try await Self.count(alice, "SELECT count(*) FROM photos") == 1)
            await alice.close()
        }
    }

    @Test(
        "a grant to a scope whose data changed too: the new scope's patch from version 1 is not for Alice's version 1, so she downloads it in full"
    )
    func grantTakesTheFullDownload() async throws {
        try await withWorld { world in
            let alice = try await world.client("alice", token: "alice-token")
            _ = try await alice.checkForUpdates()
            #expect(try await alice.status().version == 1)

            // Tier 2's data changes (so it gets version 2 with a patch from its own version 1) as Alice is granted it
            try world.execute("UPDATE campgrounds SET name = name || ' (renovated)' WHERE id = '\(Self.fjall)'")
            try world.execute("UPDATE users SET access_tier = 2 WHERE id = 'alice'")
            try await world.publishAndWait()
            let tier2 = try #require(
                try FileSnapshotStore(root: world.store).storedManifest(for: Self.dataset)?.entry(for: "2")?.current)
            let patch = try #require(tier2.published.patch(from: 1))
            #expect(tier2.version == 2 && patch.base != nil)

            let result = try await alice.checkForUpdates()
            // Not from her version 1: the new scope's own checkpoint (version 1 of tier 2) and its patch, or its file.
            let checkpointStart = try FileSnapshotStore(root: world.store).storedManifest(for: Self.dataset)?
                .entry(for: "2")?.retained.first { $0.isCheckpoint && $0.version < tier2.version }
            #expect(
                [.full, checkpointStart.map { .patch(from: $0.version, to: tier2.version) }].contains(
                    result.download?.path))
            #expect(result.check.patchFailure == nil)
            #expect(result.download?.sha256 == tier2.sha256)
            #expect(try await alice.applyPendingUpdate().applied)
            #expect(try await Self.campgrounds(alice).count == 5)
            let renamed = try await alice.withDatabase { db in
                try db.scalar("SELECT name FROM campgrounds WHERE id = ?", [.text(Self.fjall)])?.text
            }
            #expect(renamed?.hasSuffix(" (renovated)") == true)
            await alice.close()
        }
    }

    @Test("an admin deletes a campground: it disappears for everyone at the next swap")
    func adminDeletes() async throws {
        try await withWorld { world in
            let alice = try await world.client("alice", token: "alice-token")
            let bob = try await world.client("bob", token: "bob-token")
            _ = try await alice.checkForUpdates()
            _ = try await bob.checkForUpdates()
            try world.execute(
                "DELETE FROM reviews WHERE campground_id = '\(Self.pine)'; DELETE FROM photos WHERE campground_id = '\(Self.pine)'; DELETE FROM campgrounds WHERE id = '\(Self.pine)'"
            )
            try await world.publishAndWait()
            for client in [alice, bob] {
                #expect(try await client.checkForUpdates().outcome == .updateDownloaded)
                #expect(try await client.applyPendingUpdate().applied)
                #expect(try await !Self.campgrounds(client).contains(Self.pine))
                #expect(
                    try await Self.count(client, "SELECT count(*) FROM reviews WHERE campground_id = '\(Self.pine)'")
                        == 0)
            }
            let aliceCount = try await Self.campgrounds(alice).count
            let bobCount = try await Self.campgrounds(bob).count
            #expect(aliceCount == 2 && bobCount == 4)
            await alice.close()
            await bob.close()
        }
    }

    @Test(
        "after a revoke, a pending edit of a row the user can no longer see comes back forbidden and leaves the outbox")
    func forbiddenAfterDowngrade() async throws {
        try await withWorld { world in
            let bob = try await world.client("bob", token: "bob-token")
            _ = try await bob.checkForUpdates()
            // Offline, Bob edits a premium campground and a free one.
            _ = try await bob.execute("UPDATE campgrounds SET description = 'Bob was here' WHERE id = '\(Self.fjall)'")
            _ = try await bob.execute("UPDATE campgrounds SET description = 'Nice' WHERE id = '\(Self.pine)'")
            #expect(try await bob.pendingEdits() == 2)
            // Meanwhile he is downgraded to the free tier.
            try world.execute("UPDATE users SET access_tier = 0 WHERE id = 'bob'")
            try await world.publishAndWait()

            let pushed = try await bob.push()
            #expect(pushed.summary.forbidden == 1 && pushed.summary.applied == 1 && pushed.remaining == 0)
            let pg = try world.database.connect()
            #expect(
                try pg.query("SELECT description FROM campgrounds WHERE id = $1", [Self.fjall]) == [
                    ["Mountain hut above the tree line — åäö welcome."]
                ])
            #expect(try pg.query("SELECT description FROM campgrounds WHERE id = $1", [Self.pine]) == [["Nice"]])
            // The next swap removes the rows he can no longer see.
            #expect(try await bob.checkForUpdates().outcome == .updateDownloaded)
            #expect(try await bob.applyPendingUpdate().applied)
            #expect(try await Self.campgrounds(bob).count == 3)
            await bob.close()
        }
    }

    @Test("a refused token is a typed error that keeps the data and the queued edits")
    func unauthorizedKeepsEverything() async throws {
        try await withWorld { world in
            let alice = try await world.client("alice", token: "alice-token")
            _ = try await alice.checkForUpdates()
            _ = try await alice.execute("UPDATE campgrounds SET description = 'offline edit' WHERE id = '\(Self.pine)'")
            await alice.close()

            // Her token is revoked.
            try world.execute("UPDATE users SET api_token_sha256 = NULL WHERE id = 'alice'")
            try await Task.sleep(for: Self.ttl + .milliseconds(200))
            let revoked = try await world.client("alice", token: "alice-token")
            await #expect(throws: FerryError.self) { _ = try await revoked.checkForUpdates() }
            do {
                _ = try await revoked.push()
                Issue.record("push with a revoked token succeeded")
            } catch let error as FerryError {
                #expect(error.code == .unauthorized && !error.description.contains("alice-token"))
            }
            #expect(try await revoked.pendingEdits() == 1)
            #expect(try await Self.campgrounds(revoked).count == 3)
            await revoked.close()

            // Signed in again (a new token): the same edit goes through.
            try world.execute(
                "UPDATE users SET api_token_sha256 = encode(sha256('alice-new'::bytea), 'hex') WHERE id = 'alice'")
            let again = try await world.client("alice", token: "alice-new")
            let pushed = try await again.push()
            #expect(pushed.summary.applied == 1 && pushed.remaining == 0, "\(pushed)")
            #expect(
                try world.database.connect().query("SELECT description FROM campgrounds WHERE id = $1", [Self.pine])
                    == [["offline edit"]])
            await again.close()
        }
    }
}
