import FerryClientNIO
import FerryCore
import FerryPostgres
import FerryPublisher
import FerryServer
import FerryStore
import Foundation
import Logging
import Testing

@testable import FerryClient

/// Devices that edit still update by patch (docs/delta.md): real PostgreSQL with the trips template grown to 400
/// rows, the real publisher, the real server with the changes endpoint, and real client directories. Each case
/// edits, pushes (or queues), lets the office change other rows, publishes, and checks that the device's next
/// update is the patch and that it ends with exactly the published rows, plus its queued edits.
@Suite(.serialized) struct EditingDeviceDeltaTests {
    struct World: Sendable {
        let database: TestDatabase
        let directory: TemporaryDirectory
        let templatePath: String
        let server: URL
        let wait: @Sendable (Int) async throws -> Void
        var store: URL { directory.appending("store") }
        var snapshots: FileSnapshotStore { FileSnapshotStore(root: store) }

        /// Publishes the next version and waits until the server serves it.
        @discardableResult
        func publish() async throws -> Manifest {
            let result = try await Publisher(
                configuration: .init(templatePath: templatePath, databaseURL: database.url, store: store), logger: .test
            ).publish()
            try await wait(result.version)
            return try #require(try snapshots.manifest(for: "trips"))
        }

        func sql(_ text: String) throws {
            try database.connect().execute(text)
        }

        func scalar(_ sql: String) throws -> String? {
            try database.connect().query(sql, []).first?.first ?? nil
        }

        func client(_ name: String) async throws -> FerryClient {
            var configuration = FerryClient.Configuration(
                directory: directory.appending(name), serverURL: server, dataset: "trips")
            configuration.push.onOpen = false
            configuration.push.backoff = .milliseconds(10)
            return try await FerryClient.open(
                configuration: configuration.using(AsyncHTTPClientTransport()), logger: .test)
        }

        /// The office changes 10 rows the device did not touch.
        func officeChangesOtherRows() throws {
            try sql(
                #"UPDATE trips SET bags = bags + 1, "updatedAt" = now() WHERE id BETWEEN 'row-0300' AND 'row-0309'"#)
        }
    }

    func withWorld(_ body: @Sendable @escaping (World) async throws -> Void) async throws {
        let database = try TestDatabase.trips("editing", rows: 400)
        let directory = try TemporaryDirectory("editing-delta")
        defer {
            database.drop()
            directory.remove()
        }
        let root = TestPaths.packageRoot
        let template = root.appendingPathComponent("templates/trips.yml")
        let store = directory.appending("store")
        _ = try await Publisher(
            configuration: .init(templatePath: template.path, databaseURL: database.url, store: store), logger: .test
        ).publish()
        try await withFerryServer(store: store, database: .init(templatePaths: [template], databaseURL: database.url)) {
            url, wait in
            try await withoutActuallyEscaping(wait) { wait in
                try await body(
                    World(
                        database: database, directory: directory, templatePath: template.path, server: url, wait: wait))
            }
        }
    }

    /// The device's trips rows, ordered by id.
    static func rows(_ file: URL) throws -> [[SQLiteValue]] {
        try SQLiteConnection(path: file.path, mode: .readOnly).query("SELECT * FROM trips ORDER BY id")
    }

    /// Fetches, checks that the update came as the 1 → 2 patch settling `settled` of the device's own rows, applies it,
    /// and checks the device holds `manifest`'s rows, except `queued` rows which hold `expected` values.
    static func expectPatched(
        _ client: FerryClient, to manifest: Manifest, settled: Int, world: World,
        queued: [String: [SQLiteValue]?] = [:],
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let patch = try #require(manifest.current.patch(from: manifest.version - 1), sourceLocation: sourceLocation)
        let result = try await client.checkForUpdates()
        #expect(result.check.patchFailure == nil, "\(result.check.patchFailure ?? "")", sourceLocation: sourceLocation)
        #expect(
            result.download?.path == .patch(from: manifest.version - 1, to: manifest.version),
            sourceLocation: sourceLocation)
        #expect(result.bytesReceived == patch.size, sourceLocation: sourceLocation)
        #expect(result.download?.ownRowsSettled == settled, sourceLocation: sourceLocation)
        #expect(try await client.status().ownRowsSettled == settled, sourceLocation: sourceLocation)
        #expect(try await client.applyPendingUpdate().applied, sourceLocation: sourceLocation)
        let published = try rows(try world.snapshots.fileURL(dataset: "trips", sha256: manifest.sha256))
        var expected = published.filter { row in queued[row[0].text ?? ""] == nil }
        for case (_, let row?) in queued { expected.append(row) }
        expected.sort { ($0[0].text ?? "") < ($1[0].text ?? "") }
        let device = try rows(client.directory.database)
        // Queued rows are compared on id, name, passengers and bags (their stamps are the device's clock).
        func comparable(_ rows: [[SQLiteValue]]) -> [[SQLiteValue]] { rows.map { Array($0.prefix(4)) } }
        #expect(comparable(device) == comparable(expected), sourceLocation: sourceLocation)
        if queued.isEmpty {
            #expect(device == published, sourceLocation: sourceLocation)
            let db = try SQLiteConnection(path: client.directory.database.path, mode: .readOnly)
            #expect(
                try ContentDigest.compute(db, tables: ["trips"]).description == manifest.contentDigest,
                sourceLocation: sourceLocation)
        }
        #expect(try await client.status().version == manifest.version, sourceLocation: sourceLocation)
    }

    @Test("a pushed edit answered applied: the next update is the patch, with exactly the published rows")
    func appliedEdit() async throws {
        try await withWorld { world in
            let device = try await world.client("device")
            #expect(try await device.checkForUpdates().outcome == .initialSync)
            _ = try await device.execute("UPDATE trips SET passengers = 50 WHERE id = 'row-0001'")
            let pushed = try await device.push()
            #expect(pushed.summary.applied == 1 && pushed.remaining == 0)
            #expect(try world.scalar("SELECT passengers FROM trips WHERE id = 'row-0001'") == "50")
            try world.officeChangesOtherRows()
            let v2 = try await world.publish()
            try await Self.expectPatched(device, to: v2, settled: 1, world: world)
            #expect(
                try await device.withDatabase {
                    try $0.scalar("SELECT passengers FROM trips WHERE id = 'row-0001'")?.integer
                } == 50)
            await device.close()
        }
    }

    @Test(
        "an answer the new version does not carry yet (published before the merge) stays on the device until the version that does"
    )
    func answerNotYetPublished() async throws {
        try await withWorld { world in
            let device = try await world.client("device")
            _ = try await device.checkForUpdates()
            // Version 2 is published before the device's edit reaches the server
            try world.officeChangesOtherRows()
            let v2 = try await world.publish()
            _ = try await device.execute("UPDATE trips SET passengers = 50 WHERE id = 'row-0001'")
            #expect(try await device.push().summary.applied == 1)
            // The patch to version 2 applies and is verified, and the device still shows its answered edit: an app
            // that edits by what it reads must not build on the older value
            let result = try await device.checkForUpdates()
            #expect(result.download?.path == .patch(from: 1, to: 2), "\(result.check.patchFailure ?? "")")
            #expect(try await device.applyPendingUpdate().applied)
            #expect(try await device.status().version == v2.version)
            #expect(
                try await device.withDatabase {
                    try $0.scalar("SELECT passengers FROM trips WHERE id = 'row-0001'")?.integer
                } == 50)
            // Version 3 carries the answer: by patch again, and then the device holds exactly the published rows
            try world.sql(#"UPDATE trips SET bags = bags + 1, "updatedAt" = now() WHERE id = 'row-0350'"#)
            let v3 = try await world.publish()
            try await Self.expectPatched(device, to: v3, settled: 1, world: world)
            #expect(
                try await device.withDatabase {
                    try $0.scalar("SELECT passengers FROM trips WHERE id = 'row-0001'")?.integer
                } == 50)
            await device.close()
        }
    }

    @Test("a pushed edit answered rejected (a later office write wins): the patch brings the office's row")
    func rejectedEdit() async throws {
        try await withWorld { world in
            let device = try await world.client("device")
            _ = try await device.checkForUpdates()
            _ = try await device.execute("UPDATE trips SET passengers = 50 WHERE id = 'row-0001'")
            // The office's write is a day ahead: the server shifts the device's edit time by the batch's
            // send-to-receive delay, so a write only milliseconds later could lose under load
            try world.sql(
                #"UPDATE trips SET passengers = 60, "updatedAt" = now() + interval '1 day' WHERE id = 'row-0001'"#)
            let pushed = try await device.push()
            #expect(pushed.summary.rejected == 1 && pushed.remaining == 0)
            try world.officeChangesOtherRows()
            let v2 = try await world.publish()
            try await Self.expectPatched(device, to: v2, settled: 1, world: world)
            #expect(
                try await device.withDatabase {
                    try $0.scalar("SELECT passengers FROM trips WHERE id = 'row-0001'")?.integer
                } == 60)
            await device.close()
        }
    }

    @Test("a pushed edit answered gone (the office deleted the row): the patch deletes it")
    func goneEdit() async throws {
        try await withWorld { world in
            let device = try await world.client("device")
            _ = try await device.checkForUpdates()
            _ = try await device.execute("UPDATE trips SET passengers = 50 WHERE id = 'row-0001'")
            try world.sql("DELETE FROM trips WHERE id = 'row-0001'")
            let pushed = try await device.push()
            #expect(pushed.summary.gone == 1 && pushed.remaining == 0)
            try world.officeChangesOtherRows()
            let v2 = try await world.publish()
            try await Self.expectPatched(device, to: v2, settled: 1, world: world)
            #expect(
                try await device.withDatabase {
                    try $0.scalar("SELECT count(*) FROM trips WHERE id = 'row-0001'")?.integer
                } == 0)
            await device.close()
        }
    }

    @Test(
        "an insert and a delete the device pushed arrive by patch, and a queued edit on top of an acknowledged one is replayed"
    )
    func insertDeleteAndQueuedOnTopOfAcknowledged() async throws {
        try await withWorld { world in
            let device = try await world.client("device")
            _ = try await device.checkForUpdates()
            let id = "0b5e0b5e-0000-4000-8000-000000000001"
            _ = try await device.execute(
                "INSERT INTO trips(id, name, passengers, bags) VALUES ('\(id)', 'Visby-Nynäshamn', 3, 1)")
            _ = try await device.execute("DELETE FROM trips WHERE id = 'row-0002'")
            _ = try await device.execute("UPDATE trips SET passengers = 50 WHERE id = 'row-0001'")
            #expect(try await device.push().summary.applied == 3)
            // A queued edit on top of the acknowledged one, made after the push
            _ = try await device.execute("UPDATE trips SET passengers = 51 WHERE id = 'row-0001'")
            #expect(try await device.pendingEdits() == 1)
            try world.officeChangesOtherRows()
            let v2 = try await world.publish()
            let queuedRow: [SQLiteValue] = [.text("row-0001"), .text("Trip number 1"), .integer(51), .integer(1)]
            try await Self.expectPatched(device, to: v2, settled: 3, world: world, queued: ["row-0001": queuedRow])
            #expect(
                try await device.withDatabase { try $0.scalar("SELECT name FROM trips WHERE id = '\(id)'")?.text }
                    == "Visby-Nynäshamn")
            #expect(
                try await device.withDatabase {
                    try $0.scalar("SELECT count(*) FROM trips WHERE id = 'row-0002'")?.integer
                } == 0)
            // The queued edit still goes up, and the version after it carries it; that update is a patch too
            #expect(try await device.push().summary.applied == 1)
            try world.officeChangesOtherRows()
            let v3 = try await world.publish()
            try await Self.expectPatched(device, to: v3, settled: 1, world: world)
            #expect(
                try await device.withDatabase {
                    try $0.scalar("SELECT passengers FROM trips WHERE id = 'row-0001'")?.integer
                } == 51)
            await device.close()
        }
    }

    @Test("a row changed behind Ferry's back with the sqlite3 shell still takes the full download")
    func changedBehindFerrysBack() async throws {
        let sqlite3 = ["/usr/bin/sqlite3", "/usr/local/bin/sqlite3"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
        try await withWorld { world in
            let device = try await world.client("device")
            _ = try await device.checkForUpdates()
            _ = try await device.execute("UPDATE trips SET passengers = 50 WHERE id = 'row-0001'")
            #expect(try await device.push().summary.applied == 1)
            await device.close()
            // Given a row the device did not write, changed in the sqlite3 shell with capture off, that the patch
            // touches
            let shell = try #require(sqlite3, "the sqlite3 shell (Debian's sqlite3 package) is needed")
            let process = Process()
            process.executableURL = URL(fileURLWithPath: shell)
            process.arguments = [
                world.directory.appending("device/database.db").path,
                "UPDATE ferry_capture SET enabled = 0; UPDATE trips SET name = 'edited in the shell' WHERE id = 'row-0305'; UPDATE ferry_capture SET enabled = 1;",
            ]
            try process.run()
            await process.waitForExit()
            #expect(process.terminationStatus == 0)
            try world.officeChangesOtherRows()
            let v2 = try await world.publish()
            let reopened = try await world.client("device")
            let result = try await reopened.checkForUpdates()
            #expect(result.download?.path == .full)
            #expect(result.check.patchFailure != nil)
            #expect(result.download?.ownRowsSettled == nil)
            #expect(try await reopened.applyPendingUpdate().applied)
            #expect(
                try Self.rows(reopened.directory.database)
                    == Self.rows(try world.snapshots.fileURL(dataset: "trips", sha256: v2.sha256)))
            await reopened.close()
        }
    }
}
