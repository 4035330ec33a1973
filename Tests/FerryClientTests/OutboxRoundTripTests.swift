import AsyncHTTPClient
import FerryClientNIO
import FerryCore
import FerryMerge
import FerryPostgres
import FerryPublisher
import FerryServer
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOFoundationEssentialsCompat
import Testing

@testable import FerryClient

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Offline edits end to end: real PostgreSQL with the thesis' trips, the real publisher, the real server with the
/// changes endpoint, and real client directories.
@Suite struct OutboxRoundTripTests {
    struct World: Sendable {
        let database: TestDatabase
        let directory: TemporaryDirectory
        let templatePath: String
        var store: URL { directory.appending("store") }

        func publish() async throws -> PublishResult {
            try await Publisher(
                configuration: .init(templatePath: templatePath, databaseURL: database.url, store: store), logger: .test
            ).publish()
        }

        func scalar(_ sql: String, _ parameters: [String?] = []) throws -> String? {
            try database.connect().query(sql, parameters).first?.first ?? nil
        }

        func client(_ name: String, server: URL, pushOnOpen: Bool = false) async throws -> FerryClient {
            var configuration = FerryClient.Configuration(
                directory: directory.appending(name), serverURL: server, dataset: "trips")
            configuration.push.onOpen = pushOnOpen
            configuration.push.backoff = .milliseconds(10)
            return try await FerryClient.open(configuration: configuration, logger: .test)
        }
    }

    /// Loads templates/trips.pg.sql into a fresh database, publishes version 1, and runs `body` against the real
    /// server with the changes endpoint for the trips template.
    func withWorld(_ body: @Sendable @escaping (World, URL, @Sendable (Int) async throws -> Void) async throws -> Void)
        async throws
    {
        let database = try TestDatabase.create("outbox")
        let directory = try TemporaryDirectory("outbox-e2e")
        defer {
            database.drop()
            directory.remove()
        }
        let root = TestPaths.packageRoot
        let sql = try String(contentsOf: root.appendingPathComponent("templates/trips.pg.sql"), encoding: .utf8)
        try database.connect().execute(sql)
        let world = World(
            database: database, directory: directory,
            templatePath: root.appendingPathComponent("templates/trips.yml").path)
        #expect(try await world.publish().version == 1)

        var configuration = ServerConfiguration(storePath: world.store, port: 0)
        configuration.pollInterval = .milliseconds(100)
        configuration.database = .init(
            templatePaths: [URL(fileURLWithPath: world.templatePath)], databaseURL: database.url)
        let app = try await buildApplication(configuration, logger: .test)
        try await app.test(.live) { client in
            let url = URL(string: "http://127.0.0.1:\(client.port!)")!
            let waitForVersion: @Sendable (Int) async throws -> Void = { version in
                for _ in 0..<100 {
                    let response = try await client.execute(uri: "/v1/datasets/trips/manifest", method: .get)
                    if let manifest = try? Manifest.decode(Data(buffer: response.body)), manifest.version >= version {
                        return
                    }
                    try await Task.sleep(for: .milliseconds(50))
                }
                throw FerryError(.network, "the server did not pick up version \(version)")
            }
            try await body(world, url, waitForVersion)
        }
    }

    static func passengers(_ client: FerryClient, _ name: String) async throws -> Int64? {
        try await client.withDatabase { db in
            try db.scalar("SELECT passengers FROM trips WHERE name = ?", [.text(name)])?.integer
        }
    }

    @Test func editsSurviveASwapArePushedAndArriveInTheNextSnapshot() async throws {
        try await withWorld { world, server, waitForVersion in
            let device = try await world.client("device", server: server)
            #expect(try await device.checkForUpdates().outcome == .initialSync)

            // Given an offline edit on the device
            let edit = try await device.execute("UPDATE trips SET passengers = 5 WHERE name = 'Växjö-Kalmar'")
            #expect(edit.changes == 1)
            #expect(try await device.pendingEdits() == 1)

            // And a server-side change published as version 2 meanwhile
            try world.database.connect().execute(
                #"UPDATE trips SET bags = 9, "updatedAt" = date_trunc('milliseconds', now()) WHERE name = 'Kalmar-Öland'"#
            )
            #expect(try await world.publish().version == 2)
            try await waitForVersion(2)

            // When the device fetches and applies version 2 with the edit still queued
            #expect(try await device.checkForUpdates().outcome == .updateDownloaded)
            #expect(try await device.applyPendingUpdate().applied)

            // Then the new server data and the local edit are both visible, and the edit is still queued
            #expect(try await Self.passengers(device, "Växjö-Kalmar") == 5)
            #expect(
                try await device.withDatabase {
                    try $0.scalar("SELECT bags FROM trips WHERE name = 'Kalmar-Öland'")?.integer
                } == 9)
            #expect(try await device.status().version == 2)
            #expect(try await device.pendingEdits() == 1)

            // When it pushes, the server applies the edit and the outbox empties
            let pushed = try await device.push()
            #expect(pushed.summary.applied == 1 && pushed.remaining == 0)
            #expect(try world.scalar("SELECT passengers FROM trips WHERE name = 'Växjö-Kalmar'") == "5")

            // And the next snapshot carries it: after fetch and apply the device is clean and at version 3
            #expect(try await world.publish().version == 3)
            try await waitForVersion(3)
            let synced = try await device.sync()
            #expect(synced.apply?.applied == true)
            #expect(try await Self.passengers(device, "Växjö-Kalmar") == 5)
            #expect(try await device.status().version == 3)
            #expect(try await device.status().outbox == 0)
            await device.close()
        }
    }

    @Test(arguments: TransportKind.allCases) func aCrashBetweenUploadAndAcknowledgementAppliesOnce(
        _ kind: TransportKind
    ) async throws {
        try await withWorld { world, server, _ in
            let device = try await world.client("device", server: server)
            _ = try await device.checkForUpdates()
            _ = try await device.execute("UPDATE trips SET passengers = 7 WHERE name = 'Göteborg-Malmö'")

            // Given an upload the server applied but whose answer never reached the device (the process died)
            let batch = try await device.withDatabase { try Outbox.takeBatch(from: $0, limit: 500) }
            // The device's own id: the server answers a retried change only to the device that sent it.
            let deviceID = try await device.deviceID()
            let request = ChangeBatch(clientId: deviceID, sentAt: Timestamp.format(Date()), changes: batch)
            let uploader = try kind.make()
            let first = try await uploader.uploader(server: server).upload(request, dataset: "trips")
            try await uploader.shutdown()
            #expect(first.results.map(\.status) == [.applied])
            await device.close()
            let stamped = try world.scalar(#"SELECT "updatedAt"::text FROM trips WHERE name = 'Göteborg-Malmö'"#)

            // When the device starts again (open pushes pending edits, in the background)
            let restarted = try await world.client("device", server: server, pushOnOpen: true)

            // Then the change was answered from the server's record: one effect, and the outbox is empty
            #expect(try await eventually { try await restarted.pendingEdits() == 0 })
            #expect(
                try world.scalar("SELECT result::jsonb->>'status' FROM ferry_changes WHERE id = $1", [batch[0].id])
                    == "applied")
            #expect(try world.scalar("SELECT count(*) FROM ferry_changes WHERE id = $1", [batch[0].id]) == "1")
            #expect(try world.scalar(#"SELECT "updatedAt"::text FROM trips WHERE name = 'Göteborg-Malmö'"#) == stamped)
            #expect(try world.scalar("SELECT passengers FROM trips WHERE name = 'Göteborg-Malmö'") == "7")
            await restarted.close()
        }
    }

    @Test func openReturnsWhileTheServerNeverAnswersAndPushesInTheBackgroundWhenItCan() async throws {
        try await withWorld { world, server, _ in
            // Given a device with one edit queued
            let device = try await world.client("device", server: server)
            _ = try await device.checkForUpdates()
            _ = try await device.execute("UPDATE trips SET passengers = 5 WHERE name = 'Göteborg-Malmö'")
            await device.close()

            // When it opens against a server that accepts the connection and never answers (the upload's own
            // timeout is 60 s)
            let (socket, port) = try BadNetworkTests.silentListener()
            defer { close(socket) }
            let started = ContinuousClock.now
            let stalled = try await world.client(
                "device", server: URL(string: "http://127.0.0.1:\(port)")!, pushOnOpen: true)

            // Then open returns at once, the edit still queued, and close cancels the push instead of waiting it out
            #expect(ContinuousClock.now - started < .seconds(5), "open took \(ContinuousClock.now - started)")
            #expect(try await stalled.pendingEdits() == 1)
            let closing = ContinuousClock.now
            await stalled.close()
            #expect(ContinuousClock.now - closing < .seconds(5), "close took \(ContinuousClock.now - closing)")

            // And opened against the real server, the push happens after open returned
            let online = try await world.client("device", server: server, pushOnOpen: true)
            #expect(try await eventually { try await online.pendingEdits() == 0 })
            #expect(try world.scalar("SELECT passengers FROM trips WHERE name = 'Göteborg-Malmö'") == "5")
            await online.close()
        }
    }

    @Test func twoDevicesEditTheSameRowOfflineAndTheNewerServerWriteWins() async throws {
        try await withWorld { world, server, _ in
            let alice = try await world.client("alice", server: server)
            let bob = try await world.client("bob", server: server)
            _ = try await alice.checkForUpdates()
            _ = try await bob.checkForUpdates()

            // Both edit the same row offline from the same base; Bob edits first
            _ = try await bob.execute("UPDATE trips SET passengers = 2 WHERE name = 'Växjö-Kalmar'")
            try await Task.sleep(for: .milliseconds(20))
            _ = try await alice.execute("UPDATE trips SET passengers = 1 WHERE name = 'Växjö-Kalmar'")

            // Alice pushes first: no conflict, applied. Bob pushes next: the server row changed after his edit.
            #expect(try await alice.push().summary.applied == 1)
            let bobs = try await bob.push()
            #expect(bobs.summary.rejected == 1)

            // Newest wins: the server keeps Alice's value, and Bob's device now shows the winner
            #expect(try world.scalar("SELECT passengers FROM trips WHERE name = 'Växjö-Kalmar'") == "1")
            #expect(try await Self.passengers(bob, "Växjö-Kalmar") == 1)
            #expect(try await bob.pendingEdits() == 0)
            await alice.close()
            await bob.close()
        }
    }

    @Test(arguments: TransportKind.allCases) func offlinePushKeepsEditsAndReadOnlyTablesRefuseWrites(
        _ kind: TransportKind
    ) async throws {
        try await withWorld { world, server, _ in
            let device = try await world.client("device", server: server)
            _ = try await device.checkForUpdates()
            _ = try await device.execute("DELETE FROM trips WHERE name = 'Kalmar-Öland'")
            await device.close()

            // A server that is not there: the push fails as offline and nothing leaves the outbox
            var configuration = FerryClient.Configuration(
                directory: world.directory.appending("device"), serverURL: URL(string: "http://127.0.0.1:9")!,
                dataset: "trips")
            configuration.push.onOpen = false
            configuration.push.attempts = 2
            configuration.push.backoff = .milliseconds(10)
            let transport = try kind.make(connectTimeout: .seconds(1))
            let offline = try await FerryClient.open(
                configuration: configuration.using(transport.snapshot), logger: .test)
            let error = await #expect(throws: FerryError.self) { try await offline.push() }
            #expect(error?.code == .offline)
            try await transport.shutdown()
            #expect(try await offline.pendingEdits() == 1)
            // ferry_snapshot is not a table of the template: writes to it are not captured as edits
            #expect(try await offline.status().outbox == 1)
            await offline.close()
            #expect(try world.scalar("SELECT count(*) FROM trips WHERE name = 'Kalmar-Öland'") == "1")
        }
    }
}
