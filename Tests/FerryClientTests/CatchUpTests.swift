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

/// A device that was away for many versions still updates by one patch (docs/delta.md, "Catching up"): the real
/// publisher keeps the steps within the patch horizon, the real server merges them into the net change on request,
/// and real clients take it, verified as strictly as any patch.
@Suite(.serialized) struct CatchUpTests {
    struct World: Sendable {
        let database: TestDatabase
        let directory: TemporaryDirectory
        let templatePath: String
        let server: URL
        let wait: @Sendable (Int) async throws -> Void
        var store: URL { directory.appending("store") }
        var snapshots: FileSnapshotStore { FileSnapshotStore(root: store) }

        func sql(_ text: String) throws { try database.connect().execute(text) }

        /// Publishes the next version (`keep` checkpoints, every version a checkpoint when `everyVersionInFull`)
        /// and waits until the server serves it.
        @discardableResult
        func publish(keep: Int = 5, everyVersionInFull: Bool = false, horizon: Duration = .seconds(86_400))
            async throws -> Int
        {
            var configuration = Publisher.Configuration(
                templatePath: templatePath, databaseURL: database.url, store: store, keep: keep)
            if everyVersionInFull { configuration.checkpointAt = 0 }
            configuration.patchHorizon = horizon
            let version = try await Publisher(configuration: configuration, logger: .test).publish().version
            try await wait(version)
            return version
        }

        func client(_ name: String) async throws -> FerryClient {
            var configuration = FerryClient.Configuration(
                directory: directory.appending(name), serverURL: server, dataset: "trips")
            configuration.push.onOpen = false
            configuration.push.backoff = .milliseconds(10)
            return try await FerryClient.open(
                configuration: configuration.using(AsyncHTTPClientTransport()), logger: .test)
        }

        /// The served manifest.
        func manifest() async throws -> Manifest {
            let (_, data) = try await CheckpointServingTests.get(server, "v1/datasets/trips/manifest")
            return try Manifest.decode(data)
        }
    }

    func withWorld(_ body: @Sendable @escaping (World) async throws -> Void) async throws {
        let database = try TestDatabase.trips("catchup", rows: 1000)
        let directory = try TemporaryDirectory("catch-up")
        defer {
            database.drop()
            directory.remove()
        }
        let root = TestPaths.packageRoot
        let template = root.appendingPathComponent("templates/trips.yml")
        let store = directory.appending("store")
        var configuration = Publisher.Configuration(
            templatePath: template.path, databaseURL: database.url, store: store)
        configuration.patchHorizon = .seconds(86_400)
        _ = try await Publisher(configuration: configuration, logger: .test).publish()
        try await withFerryServer(store: store, database: .init(templatePaths: [template], databaseURL: database.url)) {
            url, wait in
            try await withoutActuallyEscaping(wait) { wait in
                try await body(
                    World(
                        database: database, directory: directory, templatePath: template.path, server: url, wait: wait))
            }
        }
    }

    /// The same 10 rows changed again: round `round`.
    static func changeTheSameRows(_ world: World, round: Int) throws {
        try world.sql(
            #"UPDATE trips SET passengers = \#(round), "updatedAt" = now() WHERE id BETWEEN 'row-0011' AND 'row-0020'"#)
    }

    /// Checks `client` updates by one patch from `from` to the served version, applies it and holds its rows.
    /// A device with `queued` edits holds them on top of the published rows, so its content digest is not checked.
    static func expectCaughtUp(
        _ client: FerryClient, from: Int, world: World, queued: Bool = false,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> Int64 {
        let manifest = try await world.manifest()
        let result = try await client.checkForUpdates()
        #expect(result.check.patchFailure == nil, "\(result.check.patchFailure ?? "")", sourceLocation: sourceLocation)
        #expect(
            result.download?.path == .patch(from: from, to: manifest.version), sourceLocation: sourceLocation)
        #expect(result.bytesReceived < manifest.gzipSize, sourceLocation: sourceLocation)
        #expect(try await client.applyPendingUpdate().applied, sourceLocation: sourceLocation)
        let status = try await client.status()
        #expect(status.version == manifest.version, sourceLocation: sourceLocation)
        if !queued {
            let db = try SQLiteConnection(path: client.directory.database.path, mode: .readOnly)
            #expect(
                try ContentDigest.compute(db, tables: ["trips"]).description == manifest.contentDigest,
                sourceLocation: sourceLocation)
        }
        return result.bytesReceived
    }

    @Test("30 versions of the same rows: a device at the first takes one patch of about one version's bytes")
    func sameRowsManyVersions() async throws {
        try await withWorld { world in
            let device = try await world.client("device")
            _ = try await device.checkForUpdates()
            _ = try await device.applyPendingUpdate()
            var steps: [Int64] = []
            for round in 1...30 {
                try Self.changeTheSameRows(world, round: round)
                try await world.publish()
                steps.append(try #require(try world.snapshots.requireManifest("trips").scopes[0].current.step).size)
            }
            let manifest = try await world.manifest()
            #expect(manifest.version == 31 && manifest.catchUpFrom == 1)
            // Version 1 is the checkpoint: the publisher's patch from it is what new devices start from.
            #expect(manifest.checkpoint?.version == 1 && manifest.current.patch(from: 1) != nil)
            let bytes = try await Self.expectCaughtUp(device, from: 1, world: world)
            // The net change is the last version's 10 rows, not 30 versions of history.
            #expect(bytes <= steps.max()! * 3 / 2, "moved \(bytes) bytes; one step is \(steps.last!)")
            await device.close()
        }
    }

    @Test("devices left at several points of a history, one with queued edits, catch up by one patch each")
    func devicesAtSeveralPoints() async throws {
        try await withWorld { world in
            var devices: [(FerryClient, Int)] = []
            for round in 1...12 {
                if [1, 4, 9].contains(round) {
                    let device = try await world.client("device-\(round)")
                    _ = try await device.checkForUpdates()
                    _ = try await device.applyPendingUpdate()
                    devices.append((device, try await device.status().version!))
                }
                try world.sql(
                    #"UPDATE trips SET bags = bags + 1, "updatedAt" = now() WHERE id = 'row-\#(String(format: "%04d", 100 + round))'"#
                )
                try await world.publish(keep: 2)
            }
            // The first device queues an edit it never pushes: it survives the catch-up, replayed on top
            _ = try await devices[0].0.execute("UPDATE trips SET name = 'Queued on the device' WHERE id = 'row-0500'")
            for (index, (device, version)) in devices.enumerated() {
                _ = try await Self.expectCaughtUp(device, from: version, world: world, queued: index == 0)
            }
            let queued = try await devices[0].0.withDatabase {
                try $0.scalar("SELECT name FROM trips WHERE id = 'row-0500'")?.text
            }
            #expect(queued == "Queued on the device")
            // --keep 2 counts checkpoints: the history is what the catch-up came from, and the store stays small
            let stored = try world.snapshots.requireManifest("trips")
            let checkpoints = stored.scopes[0].retained.filter(\.isCheckpoint)
            #expect(checkpoints.count <= 2)
            let objects = try world.snapshots.objectFileNames(dataset: "trips")
            let patchBytes = try objects.filter { $0.hasSuffix(".patch.gz") }.reduce(Int64(0)) {
                $0
                    + (try FileSnapshotStore.fileSize(
                        world.snapshots.objectsDirectory(dataset: "trips").appendingPathComponent($1)))
            }
            #expect(patchBytes < 2 * checkpoints.last!.gzipSize, "patches \(patchBytes) bytes")
            #expect(objects.filter { $0.hasSuffix(".sqlite") }.count == checkpoints.count)
            for (device, _) in devices { await device.close() }
        }
    }

    @Test("--patch-horizon 0: no catch-up beyond the patches the manifest names; the device takes the full download")
    func noHorizon() async throws {
        try await withWorld { world in
            let device = try await world.client("device")
            _ = try await device.checkForUpdates()
            _ = try await device.applyPendingUpdate()
            for round in 1...6 {
                try Self.changeTheSameRows(world, round: round)
                try await world.publish(everyVersionInFull: true, horizon: .zero)
            }
            let manifest = try await world.manifest()
            #expect(manifest.catchUpFrom == nil)
            #expect(manifest.current.patch(from: 1) == nil)
            let (status, _) = try await CheckpointServingTests.get(world.server, "v1/datasets/trips/patches/1-7")
            #expect(status == 404)
            let result = try await device.checkForUpdates()
            #expect(result.download?.path == .full && result.check.patchFailure == nil)
            await device.close()
        }
    }

    @Test("a bad --patch-horizon is a usage error (exit 2) that names the flag")
    func badHorizon() async throws {
        for value in ["soon", "-1d", "400d"] {
            let run = try await runFerry([
                "publish", "--config", "templates/trips.yml", "--patch-horizon", value,
            ])
            #expect(run.status == 2, "\(value): \(run.stderr)")
            #expect(run.stderr.contains("--patch-horizon"), "\(value): \(run.stderr)")
        }
    }
}
