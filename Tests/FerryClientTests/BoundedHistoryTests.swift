import FerryClientNIO
import FerryCore
import FerryPostgres
import FerryPublisher
import FerryServer
import FerryStore
import Foundation
import Testing

@testable import FerryClient

/// A bounded history (docs/delta.md, "A bounded history"): thousands of versions on a simulated clock keep the
/// manifests small, and devices at any point of the history, inside compacted spans too, still catch up by one
/// patch; catch-up merges stay capped under a storm of distinct versions.
@Suite(.serialized) struct BoundedHistoryTests {
    /// Publishes the next version at `clock` without waiting for the server.
    static func publish(_ world: CatchUpTests.World, at clock: Date) async throws {
        var configuration = Publisher.Configuration(
            templatePath: world.templatePath, databaseURL: world.database.url, store: world.store)
        configuration.patchHorizon = .seconds(30 * 86_400)
        configuration.clock = { clock }
        _ = try await Publisher(configuration: configuration, logger: .test).publish()
    }

    /// Waits until the server serves `version`, asking on a new connection each time (the harness's own client keeps
    /// one connection, which the server closes after a minute of silence).
    static func waitServed(_ world: CatchUpTests.World, _ version: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while try await world.manifest().version < version {
            guard ContinuousClock.now < deadline else {
                throw FerryError(.network, "the server did not serve version \(version) within 10 s")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// A device holding the version the server serves now.
    static func device(_ world: CatchUpTests.World, _ name: String, at version: Int) async throws -> FerryClient {
        try await waitServed(world, version)
        let device = try await world.client(name)
        _ = try await device.checkForUpdates()
        _ = try await device.applyPendingUpdate()
        #expect(try await device.status().version == version)
        return device
    }

    @Test(
        "after 2,000 versions 10 minutes apart, the manifests stay under 256 KB and 16 KB, and devices at versions 1, 500 and 1,999 each catch up by one patch"
    )
    func twoThousandVersions() async throws {
        try await CatchUpTests().withWorld { world in
            let first = try await Self.device(world, "at-1", at: 1)
            let start = Date()
            var devices = [(first, 1)]
            for version in 2...2_001 {
                try world.sql(
                    #"UPDATE trips SET passengers = \#(version), "updatedAt" = now() WHERE id = 'row-\#(String(format: "%04d", 1 + version % 40))'"#
                )
                try await Self.publish(world, at: start.addingTimeInterval(Double(version) * 600))
                if version == 500 || version == 1_999 {
                    devices.append((try await Self.device(world, "at-\(version)", at: version), version))
                }
            }
            try await Self.waitServed(world, 2_001)
            let stored = try Data(contentsOf: world.snapshots.manifestURL(dataset: "trips"))
            let served = try await world.manifest()
            let (_, servedBytes) = try await CheckpointServingTests.get(world.server, "v1/datasets/trips/manifest")
            #expect(stored.count < 256 << 10, "the store's manifest is \(stored.count) bytes")
            #expect(servedBytes.count < 16 << 10, "the device's manifest is \(servedBytes.count) bytes")
            let chain = try world.snapshots.requireManifest("trips").scopes[0].chain
            #expect(chain.count < 200 && chain.first?.version == 1, "\(chain.count) points")
            #expect(!chain.contains { $0.version == 500 }, "version 500 lies inside a compacted span")
            #expect(served.catchUpFrom == 1)
            // The current version asked for whole: a cold server builds it from the newest checkpoint by the steps
            // as published, which no tier thinned (a merged step would build other bytes than the recorded ones)
            let (status, whole) = try await CheckpointServingTests.get(world.server, "v1/datasets/trips/versions/2001")
            #expect(status == 200 && CheckpointServingTests.sha256(whole) == served.sha256)
            // A retained version after a merged step is a catch-up point only: its whole file is 404, like a version
            // no longer retained (it would not be the recorded bytes), never a 500
            let scope = try world.snapshots.requireManifest("trips").scopes[0]
            let point = try #require(scope.retained.last { $0.catchUpOnly == true })
            let (pointStatus, pointBody) = try await CheckpointServingTests.get(
                world.server, "v1/datasets/trips/versions/\(point.version)")
            #expect(pointStatus == 404 && String(decoding: pointBody, as: UTF8.self).contains("catch up from"))
            #expect(!served.versions.contains(point.version), "the manifest lists only versions served whole")
            for (device, version) in devices {
                let bytes = try await CatchUpTests.expectCaughtUp(device, from: version, world: world)
                #expect(bytes < served.gzipSize)
                await device.close()
            }
        }
    }

    @Test("50 devices at 50 distinct versions ask for their catch-up patch at once: every merge is made, one at a time")
    func stormOfDistinctVersions() async throws {
        try await CatchUpTests().withWorld { world in
            for round in 1...50 {
                try CatchUpTests.changeTheSameRows(world, round: round)
                try await Self.publish(world, at: Date().addingTimeInterval(Double(round)))
            }
            try await Self.waitServed(world, 51)
            let statuses = try await withThrowingTaskGroup(of: (Int, String).self) { group in
                for from in 1...50 {
                    group.addTask {
                        let (status, body) = try await CheckpointServingTests.get(
                            world.server, "v1/datasets/trips/patches/\(from)-51")
                        return (status, status == 200 ? CheckpointServingTests.sha256(body) : "")
                    }
                }
                return try await group.reduce(into: [:]) { $0[$1.0, default: 0] += 1 }
            }
            #expect(statuses == [200: 50], "\(statuses)")
        }
    }

    @Test(
        "a damaged step in the history is never served: the catch-up over it fails, and the device takes the full download"
    )
    func damagedHistoryStep() async throws {
        try await CatchUpTests().withWorld { world in
            let device = try await world.client("device")
            for round in 1...7 {
                if round == 2 {
                    _ = try await device.checkForUpdates()
                    _ = try await device.applyPendingUpdate()
                }
                try CatchUpTests.changeTheSameRows(world, round: round)
                try await world.publish(everyVersionInFull: round == 5)
            }
            // Version 3's step, before the newest checkpoint: flip one byte of its object.
            let chain = try world.snapshots.requireManifest("trips").scopes[0].chain
            let step = try #require(chain.first { $0.version == 3 }?.step)
            let object = world.snapshots.patchURL(dataset: "trips", sha256: step.sha256)
            var bytes = try Data(contentsOf: object)
            bytes[bytes.count / 2] ^= 0xFF
            try bytes.write(to: object)
            let served = try await world.manifest()
            let result = try await device.checkForUpdates()
            #expect(result.check.patchFailure != nil)
            #expect(result.download?.path == .full && result.download?.sha256 == served.sha256)
            #expect(try await device.applyPendingUpdate().applied)
            await device.close()
        }
    }

    @Test(
        "a server serves a new step version of a 400k-row dataset within 1 s of the publish ending, spending under 0.2 s of CPU on it"
    )
    func serveLag() async throws {
        let database = try TestDatabase.trips("serve-lag", rows: 0)
        try database.connect().execute(
            """
            INSERT INTO trips (id, name, passengers, bags, "createdAt", "updatedAt")
            SELECT 'row-' || lpad(i::text, 7, '0'), 'Trip number ' || i, i % 7, i % 3, '2026-01-01', '2026-01-01'
            FROM generate_series(1, 400000) AS i
            """)
        let directory = try TemporaryDirectory("serve-lag")
        defer {
            database.drop()
            directory.remove()
        }
        let template = TestPaths.packageRoot.appendingPathComponent("templates/trips.yml").path
        let store = directory.appending("store")
        let publisher = Publisher(
            configuration: .init(templatePath: template, databaseURL: database.url, store: store), logger: .test)
        _ = try await publisher.publish()
        let server = try await ServeProcess(
            store: store, arguments: ["--cache-dir", directory.appending("cache").path])
        defer { server.kill9() }
        #expect(try await ServeProcess.waitForVersion(server.url.absoluteString, "trips", 1))
        try database.connect().execute(
            #"UPDATE trips SET passengers = passengers + 1, "updatedAt" = now() WHERE id BETWEEN 'row-0001000' AND 'row-0001039'"#
        )
        let version = try await publisher.publish().version
        let ended = ContinuousClock.now
        let cpuBefore = try Self.cpuSeconds(of: server.process.processIdentifier)
        #expect(try await ServeProcess.waitForVersion(server.url.absoluteString, "trips", version))
        let lag = ContinuousClock.now - ended
        let cpu = try Self.cpuSeconds(of: server.process.processIdentifier) - cpuBefore
        let stored = try #require(try FileSnapshotStore(root: store).storedManifest(for: "trips")?.scopes[0].current)
        #expect(!stored.isCheckpoint, "version \(version) is stored as a step")
        #expect(lag < .seconds(1), "served \(lag) after the publish ended")
        #expect(cpu < 0.2, "the server spent \(cpu) CPU seconds")
        // Nothing was built: the cache holds no file.
        #expect(CheckpointServingTests.builtFiles(directory.appending("cache")).isEmpty)
    }

    /// User and system CPU seconds of process `pid` so far (`/proc/PID/stat`, fields 14 and 15, in clock ticks).
    static func cpuSeconds(of pid: Int32) throws -> Double {
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        // The command name (field 2) may hold spaces: count the fields after its closing parenthesis.
        let fields = stat[stat.index(after: stat.lastIndex(of: ")")!)...].split(separator: " ")
        let ticks = Double(fields[11])! + Double(fields[12])!
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}
