import FerryCore
import FerryGRDB
import FerryPostgres
import FerryPublisher
import FerryServer
import Foundation
import GRDB
import Hummingbird
import HummingbirdTesting
import Logging
import NIOFoundationEssentialsCompat
import Testing

@testable import FerryClient

/// FerryGRDB end to end: real PostgreSQL with the thesis' trips, the real publisher, the real server with the
/// changes endpoint, and an app's `DatabasePool` on a real client directory.
@Suite struct FerryDatabaseTests {
    struct World: Sendable {
        let database: TestDatabase
        let directory: TemporaryDirectory
        let templatePath: String
        let server: URL
        let waitForVersion: @Sendable (Int) async throws -> Void
        var store: URL { directory.appending("store") }

        @discardableResult
        func publish() async throws -> PublishResult {
            try await Publisher(
                configuration: .init(templatePath: templatePath, databaseURL: database.url, store: store), logger: .test
            ).publish()
        }

        func postgres(_ sql: String) throws {
            try database.connect().execute(sql)
        }

        func scalar(_ sql: String) throws -> String? {
            try database.connect().query(sql, []).first?.first ?? nil
        }

        func configuration(_ name: String, pushOnOpen: Bool = false) -> FerryClient.Configuration {
            var configuration = FerryClient.Configuration(
                directory: directory.appending(name), serverURL: server, dataset: "trips")
            configuration.push.onOpen = pushOnOpen
            configuration.push.backoff = .milliseconds(10)
            return configuration
        }

        func open(_ name: String, mode: FerryDatabase.ApplyMode, pushOnOpen: Bool = false) async throws -> FerryDatabase
        {
            try await FerryDatabase.open(
                configuration: configuration(name, pushOnOpen: pushOnOpen), applyMode: mode, logger: .test)
        }

        /// Changes one trip in PostgreSQL and publishes the next version; waits until the server serves it.
        func publishChange(_ set: String, where name: String) async throws -> Int {
            try postgres(
                #"UPDATE trips SET \#(set), "updatedAt" = date_trunc('milliseconds', now()) WHERE name = '\#(name)'"#)
            let version = try await publish().version
            try await waitForVersion(version)
            return version
        }
    }

    func withWorld(_ body: @Sendable @escaping (World) async throws -> Void) async throws {
        let database = try TestDatabase.create("grdb")
        let directory = try TemporaryDirectory("ferry-grdb")
        defer {
            database.drop()
            directory.remove()
        }
        let root = TestPaths.packageRoot
        try database.connect().execute(
            try String(contentsOf: root.appendingPathComponent("templates/trips.pg.sql"), encoding: .utf8))
        let templatePath = root.appendingPathComponent("templates/trips.yml").path
        _ = try await Publisher(
            configuration: .init(
                templatePath: templatePath, databaseURL: database.url, store: directory.appending("store")),
            logger: .test
        ).publish()
        var configuration = ServerConfiguration(storePath: directory.appending("store"), port: 0)
        configuration.pollInterval = .milliseconds(100)
        configuration.database = .init(templatePaths: [URL(fileURLWithPath: templatePath)], databaseURL: database.url)
        let app = try await buildApplication(configuration, logger: .test)
        try await app.test(.live) { client in
            let url = URL(string: "http://127.0.0.1:\(client.port!)")!
            let wait: @Sendable (Int) async throws -> Void = { version in
                for _ in 0..<200 {
                    let response = try await client.execute(uri: "/v1/datasets/trips/manifest", method: .get)
                    if let manifest = try? Manifest.decode(Data(buffer: response.body)), manifest.version >= version {
                        return
                    }
                    try await Task.sleep(for: .milliseconds(25))
                }
                throw FerryError(.network, "the server did not pick up version \(version)")
            }
            try await body(
                World(
                    database: database, directory: directory, templatePath: templatePath, server: url,
                    waitForVersion: wait))
        }
    }

    static func passengers(_ pool: DatabasePool, _ name: String) throws -> Int? {
        try pool.read { db in
            try Int.fetchOne(db, sql: "SELECT passengers FROM trips WHERE name = ?", arguments: [name])
        }
    }

    /// Waits for the first value of `values` that satisfies `accept`, with a deadline (an event, not a sleep).
    static func first<S: AsyncSequence & Sendable>(
        _ values: S, within seconds: Double = 30, where accept: @escaping @Sendable (S.Element) -> Bool
    ) async throws -> S.Element where S.Element: Sendable {
        try await withThrowingTaskGroup(of: S.Element?.self) { group in
            group.addTask {
                for try await value in values where accept(value) { return value }
                return nil
            }
            group.addTask {
                try await Task.sleep(for: .seconds(seconds))
                return nil
            }
            defer { group.cancelAll() }
            guard let value = try await group.next() ?? nil else {
                throw FerryError(.network, "no matching value within \(seconds) s")
            }
            return value
        }
    }

    @Test func observationFiresAfterTheInitialSyncAndAfterAnUpdateAppliedInPlace() async throws {
        try await withWorld { world in
            // Given an app that opened its directory before any sync, and observes a query
            let ferry = try await world.open("app", mode: .onRequest)
            #expect(ferry.currentStatus.state == .initialSyncRequired)
            // Before the initial sync there is no table to track: the observation tracks the whole database.
            let observation = ValueObservation.tracking(region: DatabaseRegion.fullDatabase) { db -> Int? in
                guard try db.tableExists("trips") else { return nil }
                return try Int.fetchOne(db, sql: "SELECT passengers FROM trips WHERE name = 'Växjö-Kalmar'")
            }
            let values = observation.values(in: ferry.pool)

            // When the initial sync arrives, the observation sees the published rows
            #expect(try await ferry.checkForUpdates().outcome == .initialSync)
            let original = try await Self.first(values) { $0 != nil }
            #expect(original == (try Self.passengers(ferry.pool, "Växjö-Kalmar")))
            #expect(ferry.currentStatus.state == .upToDate && ferry.currentStatus.version == 1)

            // When PostgreSQL changes and version 2 is published, a check leaves it pending (onRequest)
            let version = try await world.publishChange("passengers = 42", where: "Växjö-Kalmar")
            #expect(try await ferry.checkForUpdates().outcome == .updateDownloaded)
            #expect(ferry.currentStatus.state == .updatePending && ferry.currentStatus.pendingVersion == version)
            #expect(try Self.passengers(ferry.pool, "Växjö-Kalmar") == original)

            // Then applying it in place, under the open pool, fires the observation with the new row
            let applied = try await ferry.applyPendingUpdate()
            #expect(applied.applied && applied.version == version)
            #expect(try await Self.first(values) { $0 == 42 } == 42)
            #expect(ferry.currentStatus.state == .upToDate && ferry.currentStatus.version == version)
            // And the app can still write through the same pool: no "readonly database" after the update
            try await ferry.pool.write { db in
                try db.execute(sql: "UPDATE trips SET passengers = 43 WHERE name = 'Växjö-Kalmar'")
            }
            #expect(try await Self.first(values) { $0 == 43 } == 43)
            try await ferry.refreshStatus()
            #expect(ferry.currentStatus.queuedEdits == 1)
            try await ferry.close()
        }
    }

    @Test func automaticModeAppliesAPatchToTheLiveDatabaseInOneTransaction() async throws {
        try await withWorld { world in
            let ferry = try await world.open("patch", mode: .automatic)
            _ = try await ferry.checkForUpdates()
            let values = ValueObservation.tracking { db in
                try Int.fetchOne(db, sql: "SELECT passengers FROM trips WHERE name = 'Växjö-Kalmar'")
            }.values(in: ferry.pool)

            // Given a clean device, a one-row change arrives as a patch and is applied in place, verified by digest
            var version = try await world.publishChange("passengers = 21", where: "Växjö-Kalmar")
            var result = try await ferry.checkForUpdates()
            #expect(result.download?.path == .patch(from: version - 1, to: version))
            #expect(try await Self.first(values) { $0 == 21 } == 21)
            #expect(ferry.currentStatus.version == version && ferry.currentStatus.state == .upToDate)
            #expect(FileManager.default.fileExists(atPath: world.directory.appending("patch/previous.db").path))
            // previous.db is the version before, whole, as a plain (rollback-journal) file: cloned from the
            // checkpointed database.db while the pool's readers went on
            let previous = try SQLiteConnection(
                path: world.directory.appending("patch/previous.db").path, mode: .readOnly)
            #expect(try previous.scalar("PRAGMA journal_mode")?.text == "delete")
            #expect(try SnapshotMetadata.read(from: previous).version == version - 1)
            try previous.checkIntegrity()
            #expect(
                try ClientFiles.checkpointFully(
                    SQLiteConnection(path: world.directory.appending("patch/database.db").path, mode: .readWrite)))

            // Given a queued local edit of another row, the next patch is applied on top and the edit stays visible
            try await ferry.pool.write { db in
                try db.execute(sql: "UPDATE trips SET bags = 5 WHERE name = 'Kalmar-Öland'")
            }
            version = try await world.publishChange("passengers = 22", where: "Växjö-Kalmar")
            result = try await ferry.checkForUpdates()
            #expect(result.download?.path == .patch(from: version - 1, to: version))
            #expect(try await Self.first(values) { $0 == 22 } == 22)
            #expect(
                try await ferry.pool.read { db in
                    try Int.fetchOne(db, sql: "SELECT bags FROM trips WHERE name = 'Kalmar-Öland'")
                } == 5)
            #expect(try await ferry.client.pendingEdits() == 1)
            #expect(try await ferry.client.status().version == version)
            #expect(result.download?.ownRowsSettled == 1)

            // Given that edit pushed and answered, the next patch still applies in place: the device's own row is put
            // back as published first, and the result is exactly the published version (checked by digest)
            #expect(try await ferry.push().summary.applied == 1)
            version = try await world.publishChange("passengers = 23", where: "Växjö-Kalmar")
            result = try await ferry.checkForUpdates()
            #expect(
                result.download?.path == .patch(from: version - 1, to: version), "\(result.check.patchFailure ?? "")")
            #expect(result.download?.ownRowsSettled == 1)
            #expect(try await Self.first(values) { $0 == 23 } == 23)
            #expect(
                try await ferry.pool.read { db in
                    try Int.fetchOne(db, sql: "SELECT bags FROM trips WHERE name = 'Kalmar-Öland'")
                } == 5)
            #expect(try await ferry.client.pendingEdits() == 0)
            try await ferry.close()

            // And a reopen (a new process) reads the same version from the directory
            let status = try await FerryClient.status(directory: world.directory.appending("patch"))
            #expect(status.version == version && status.outbox == 0 && status.ownRowsSettled == 1)
        }
    }

    @Test func automaticModeAppliesAFullUpdateInPlaceAndKeepsQueuedWrites() async throws {
        try await withWorld { world in
            var configuration = world.configuration("auto")
            configuration.download.usePatches = false
            let ferry = try await FerryDatabase.open(configuration: configuration, applyMode: .automatic, logger: .test)
            _ = try await ferry.checkForUpdates()
            // A local edit through the pool is captured by the outbox
            try await ferry.pool.write { db in
                try db.execute(sql: "UPDATE trips SET bags = 7 WHERE name = 'Kalmar-Öland'")
            }
            let version = try await world.publishChange("passengers = 11", where: "Växjö-Kalmar")
            let (changes, changed) = AsyncStream.makeStream(of: Void.self)
            let region = DatabaseRegionObservation(tracking: Table("trips"))
            let cancellable = region.start(in: ferry.pool, onError: { _ in }, onChange: { _ in changed.yield() })

            // When a full update arrives in automatic mode, it is applied at once, in place
            let result = try await ferry.checkForUpdates()
            #expect(result.download?.path == .full)
            _ = try await Self.first(changes) { true }
            cancellable.cancel()
            #expect(ferry.currentStatus.version == version && ferry.currentStatus.state == .upToDate)
            #expect(try Self.passengers(ferry.pool, "Växjö-Kalmar") == 11)
            // The queued edit survived the replacement and is still queued
            #expect(
                try await ferry.pool.read { db in
                    try Int.fetchOne(db, sql: "SELECT bags FROM trips WHERE name = 'Kalmar-Öland'")
                } == 7)
            #expect(try await ferry.client.pendingEdits() == 1)
            // previous.db holds version 1 for a rollback, which is applied in place too
            let rolledBack = try await ferry.client.rollback()
            #expect(rolledBack.version == 1)
            #expect(try Self.passengers(ferry.pool, "Växjö-Kalmar") != 11)
            #expect(try await ferry.client.pendingEdits() == 1)
            // And the edit reaches PostgreSQL
            let pushed = try await ferry.push()
            #expect(pushed.summary.applied == 1)
            #expect(try world.scalar("SELECT bags FROM trips WHERE name = 'Kalmar-Öland'") == "7")
            try await ferry.close()
        }
    }

    @Test func aRejectedEditIsListedUntilAcknowledgedAcrossARestart() async throws {
        try await withWorld { world in
            let ferry = try await world.open("rejected", mode: .automatic)
            _ = try await ferry.checkForUpdates()
            // Given a device edit older than an office write of the same row (newest-wins keeps the office's)
            try await ferry.pool.write { db in
                try db.execute(sql: "UPDATE trips SET passengers = 99 WHERE name = 'Växjö-Kalmar'")
            }
            try await Task.sleep(for: .milliseconds(20))  // the office write must be newer than the device's edit time
            try world.postgres(
                #"UPDATE trips SET passengers = 3, "updatedAt" = date_trunc('milliseconds', now()) + interval '1 day' WHERE name = 'Växjö-Kalmar'"#
            )
            let pushed = try await ferry.push()
            #expect(pushed.summary.rejected == 1)
            #expect(ferry.currentStatus.rejectedEdits == 1)
            let undone = try await ferry.rejectedEdits()
            #expect(undone.count == 1)
            #expect(
                undone.first?.table == "trips" && undone.first?.values["passengers"] == .int(99)
                    && undone.first?.outcome == .rejected)
            #expect(undone.first?.rule == .newestWins)
            #expect(try Self.passengers(ferry.pool, "Växjö-Kalmar") == 3)
            try await ferry.close()

            // After a restart and an update it is still listed, until acknowledged
            let reopened = try await world.open("rejected", mode: .automatic)
            _ = try await world.publishChange("bags = 1", where: "Kalmar-Öland")
            _ = try await reopened.checkForUpdates()
            #expect(reopened.currentStatus.version == 2)
            let again = try await reopened.rejectedEdits()
            #expect(again == undone)
            try await reopened.acknowledgeRejectedEdits(again)
            #expect(try await reopened.rejectedEdits().isEmpty)
            #expect(reopened.currentStatus.rejectedEdits == 0)
            try await reopened.close()
        }
    }

    @Test func openReturnsAtOnceWithADeadNetworkAndASecondOpenIsBusy() async throws {
        let directory = try TemporaryDirectory("ferry-grdb-open")
        defer { directory.remove() }
        // A server address nothing listens on (loopback, port 9): open touches no network
        var configuration = FerryClient.Configuration(
            directory: directory.appending("app"), serverURL: URL(string: "http://127.0.0.1:9")!, dataset: "trips")
        configuration.push.onOpen = true
        // The process's one-time set-up (the SQLite session probe, URLSession's first session) is not what the bound
        // is about: a first open elsewhere pays it.
        var warm = configuration
        warm.directory = directory.appending("warm")
        try await FerryDatabase.open(configuration: warm, applyMode: .onLaunch, logger: .test).close()
        let started = ContinuousClock.now
        let ferry = try await FerryDatabase.open(configuration: configuration, applyMode: .onLaunch, logger: .test)
        // At once (issue 22: no network on open), with a generous margin for a busy 2-core machine
        #expect(ContinuousClock.now - started < .seconds(2))
        #expect(ferry.currentStatus.state == .initialSyncRequired)
        let second = await #expect(throws: FerryError.self) {
            _ = try await FerryDatabase.open(configuration: configuration, logger: .test)
        }
        #expect(second?.code == .busy)
        try await ferry.close()
    }
}
