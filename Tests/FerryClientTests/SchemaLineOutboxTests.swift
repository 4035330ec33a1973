import FerryCore
import FerryPostgres
import FerryPublisher
import FerryServer
import FerryStore
import Foundation
import Hummingbird
import HummingbirdTesting
import Testing

@testable import FerryClient

/// Edits across schema lines end to end: real PostgreSQL with the thesis' trips published in two lines (the real
/// publisher), the real server resolving lines and merging each line's edits through its own template, and a real
/// client directory that an app update moves from line 1 to line 2 with an edit still queued.
@Suite struct SchemaLineOutboxTests {
    /// With `retireLineOne`, line 1 is retired before the push: the server answers its upload 410, and its edit ends
    /// as `gone` (kept in ferry_rejected) while line 2's is merged. Each transport's uploader (URLSession's and
    /// AsyncHTTPClient's) posts to the line.
    @Test(arguments: [false, true], TransportKind.allCases)
    func anEditQueuedOnTheOldLineIsPushedToItAndOneOnTheNewLineToThat(
        retireLineOne: Bool, kind: TransportKind
    ) async throws {
        let database = try TestDatabase.create("lines")
        let directory = try TemporaryDirectory("lines-e2e")
        defer {
            database.drop()
            directory.remove()
        }
        let root = TestPaths.packageRoot
        try database.connect().execute(
            try String(contentsOf: root.appendingPathComponent("templates/trips.pg.sql"), encoding: .utf8))
        // Line 1 is templates/trips.yml; line 2 the same table under schema version 2.
        let v1 = directory.appending("trips.v1.yml")
        try FileManager.default.copyItem(at: root.appendingPathComponent("templates/trips.yml"), to: v1)
        let v2 = directory.appending("trips.v2.yml")
        try String(contentsOf: v1, encoding: .utf8).replacingOccurrences(
            of: "schemaVersion: 1", with: "schemaVersion: 2"
        )
        .write(to: v2, atomically: true, encoding: .utf8)
        let store = directory.appending("store")
        var publishing = Publisher.Configuration(templatePath: v1.path, databaseURL: database.url, store: store)
        publishing.templatePaths = [v1.path, v2.path]
        _ = try await Publisher(configuration: publishing, logger: .test).publish()

        var serving = ServerConfiguration(storePath: store, port: 0)
        serving.pollInterval = .milliseconds(100)
        serving.database = .init(templatePaths: [v1, v2], databaseURL: database.url)
        let app = try await buildApplication(serving, logger: .test)
        let transport = try kind.make()
        defer { Task { try await transport.shutdown() } }
        try await app.test(.live) { client in
            let server = URL(string: "http://127.0.0.1:\(client.port!)")!
            var config = FerryClient.Configuration(
                directory: directory.appending("device"), serverURL: server, dataset: "trips",
                acceptedSchemaVersions: [1])
            config.push.onOpen = false
            config.update.applyOnOpen = false
            func scalar(_ sql: String) throws -> String? { try database.connect().query(sql, []).first?.first ?? nil }
            func line(_ device: FerryClient) async throws -> String? {
                try await device.withDatabase { try $0.scalar("SELECT dataset FROM ferry_snapshot")?.text }
            }
            func passengers(_ device: FerryClient) async throws -> Int64? {
                try await device.withDatabase {
                    try $0.scalar("SELECT passengers FROM trips WHERE name = 'Växjö-Kalmar'")?.integer
                }
            }

            // Given the old build on line 1 with an edit queued offline
            let old = try await FerryClient.open(configuration: config.using(transport.snapshot), logger: .test)
            #expect(try await old.checkForUpdates().outcome == .initialSync)
            #expect(try await line(old) == "trips.v1")
            _ = try await old.execute("UPDATE trips SET passengers = 5 WHERE name = 'Växjö-Kalmar'")
            await old.close()

            // When the app update moves the device to line 2
            config.acceptedSchemaVersions = [1, 2]
            let device = try await FerryClient.open(configuration: config.using(transport.snapshot), logger: .test)
            defer { Task { await device.close() } }
            #expect(try await device.checkForUpdates().outcome == .updateDownloaded)
            #expect(try await device.applyPendingUpdate().applied)
            #expect(try await line(device) == "trips.v2")
            // Then line 1's edit stays queued without being replayed on line 2's tables
            #expect(try await device.pendingEdits() == 1)
            #expect(try await passengers(device) == 0)
            #expect(
                try await device.withDatabase { try $0.scalar("SELECT line FROM ferry_outbox")?.text } == "trips.v1")

            // And an edit made on line 2 is queued beside it
            _ = try await device.execute("UPDATE trips SET bags = 4 WHERE name = 'Kalmar-Öland'")
            #expect(try await device.pendingEdits() == 2)

            if retireLineOne {
                #expect(try FileSnapshotStore(root: store).retire(line: "trips.v1", at: Timestamp.format(Date())))
                let deadline = ContinuousClock.now + .seconds(20)
                while try await client.execute(uri: "/v1/datasets/trips.v1/manifest", method: .get).status != .gone,
                    ContinuousClock.now < deadline
                {
                    try await Task.sleep(for: .milliseconds(50))
                }
                let pushed = try await device.push()
                #expect(pushed.summary.gone == 1 && pushed.summary.applied == 1 && pushed.remaining == 0, "\(pushed)")
                #expect(try scalar("SELECT passengers FROM trips WHERE name = 'Växjö-Kalmar'") == "0")
                #expect(try scalar("SELECT bags FROM trips WHERE name = 'Kalmar-Öland'") == "4")
                let rejected = try await device.rejectedEdits()
                #expect(rejected.count == 1 && rejected.first?.outcome == .gone)
                #expect(rejected.first?.values["passengers"] == .int(5))
                return
            }

            // When it pushes, each edit goes to its own line and the server merges both
            let pushed = try await device.push()
            #expect(pushed.summary.applied == 2 && pushed.remaining == 0, "\(pushed)")
            #expect(try scalar("SELECT passengers FROM trips WHERE name = 'Växjö-Kalmar'") == "5")
            #expect(try scalar("SELECT bags FROM trips WHERE name = 'Kalmar-Öland'") == "4")
            #expect(
                try await device.withDatabase {
                    try $0.scalar("SELECT bags FROM trips WHERE name = 'Kalmar-Öland'")?.integer
                } == 4)
        }
    }
}
