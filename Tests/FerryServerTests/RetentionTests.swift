import FerryCore
import FerryPostgres
import FerryPublisher
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import FerryServer

/// The server keeps the merge engine's tables bounded by itself: tombstones go once no retained snapshot is older
/// than them (after a publish by any process), stored answers after the retention window; both are counted.
@Suite struct RetentionTests {
    static let tripID = "7a1f6c1e-2d7b-4c55-9a7e-0c5d7e1b0002"

    @Test("a publish from another process prunes older tombstones; stored answers go after --change-retention")
    func retention() async throws {
        // Given the trips dataset published, and a server configured from its template alone
        let database = try TestDatabase.create("retention")
        let directory = try TemporaryDirectory("retention")
        defer {
            database.drop()
            directory.remove()
        }
        let root = TestPaths.packageRoot
        nonisolated(unsafe) let pg = try database.connect()
        try pg.execute(try String(contentsOf: root.appendingPathComponent("templates/trips.pg.sql"), encoding: .utf8))
        let templatePath = root.appendingPathComponent("templates/trips.yml").path
        let store = directory.appending("store")
        // Every version a checkpoint and no history (`--checkpoint-at 0 --patch-horizon 0`): keep = 1 retains the
        // current version alone, so tombstones older than it may go
        var publishing = Publisher.Configuration(
            templatePath: templatePath, databaseURL: database.url, store: store, keep: 1)
        publishing.checkpointAt = 0
        publishing.patchHorizon = .zero
        let publisher = Publisher(configuration: publishing, logger: Logger(label: "test"))
        _ = try await publisher.publish()

        var configuration = ServerConfiguration(storePath: store, port: 0, pollInterval: .milliseconds(50))
        var settings = ServerConfiguration.DatabaseSettings(
            templatePaths: [URL(fileURLWithPath: templatePath)], databaseURL: database.url)
        settings.changeRetention = .seconds(3_600)
        settings.retentionSweepInterval = .milliseconds(100)
        configuration.database = settings
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let app = try await buildApplication(configuration, logger: logger)
        try await app.test(.live) { client in
            // When a device deletes a trip
            let batch = ChangeBatch(
                clientId: "device-1", sentAt: Timestamp.format(Date()),
                changes: [
                    Change(
                        id: "del-1", table: "trips", op: .delete, key: ["id": .string(Self.tripID)], values: [:],
                        editedAt: Timestamp.format(Date()), baseUpdatedAt: "2018-04-29T11:45:05.000Z")
                ])
            let response = try await client.execute(
                uri: "/v1/datasets/trips/changes", method: .post, headers: [.contentType: "application/json"],
                body: ByteBuffer(bytes: try JSONEncoder().encode(batch)))
            #expect(response.status == .ok)
            #expect(String(buffer: response.body).contains(#""status":"applied""#), "\(String(buffer: response.body))")
            // Then its tombstone stays while version 1 (older than the delete) is retained
            try await Task.sleep(for: .milliseconds(300))
            #expect(try Self.count(pg, "ferry_tombstones") == 1)
            #expect(try Self.count(pg, "ferry_changes") == 1)

            // When `ferry publish` (another process's job; here the library) publishes version 2 with keep = 1
            let v2 = try await publisher.publish()
            #expect(v2.version == 2)

            // Then the server sees the new manifest and prunes the tombstone, and counts it
            try await Self.eventually { try Self.count(pg, "ferry_tombstones") == 0 }
            let metrics = try await client.execute(uri: "/metrics", method: .get)
            #expect(
                String(buffer: metrics.body).contains(
                    #"ferry_retention_pruned_total{dataset="trips",kind="tombstones"} 1"#))
            // And the stored answer is younger than the hour of retention, so it stays
            #expect(try Self.count(pg, "ferry_changes") == 1)
        }

        // When the server runs with a retention window that the answer is already past
        settings.changeRetention = .zero
        configuration.database = settings
        let short = try await buildApplication(configuration, logger: logger)
        try await short.test(.live) { client in
            // Then its first sweep deletes the stored answer and counts it
            try await Self.eventually { try Self.count(pg, "ferry_changes") == 0 }
            let metrics = try await client.execute(uri: "/metrics", method: .get)
            #expect(
                String(buffer: metrics.body).contains(
                    #"ferry_retention_pruned_total{dataset="trips",kind="changes"} 1"#))
        }
    }

    static func count(_ pg: PostgresConnection, _ table: String) throws -> Int {
        Int(try pg.query("SELECT count(*) FROM \(table)").first?.first.flatMap { $0 } ?? "-1") ?? -1
    }

    /// Polls `condition` for up to 3 s.
    static func eventually(_ condition: () throws -> Bool) async throws {
        for _ in 0..<60 {
            if try condition() { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(try condition(), "not reached within 3 s")
    }
}
