import FerryClientNIO
import FerryCore
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
            for (device, version) in devices {
                let bytes = try await CatchUpTests.expectCaughtUp(device, from: version, world: world)
                #expect(bytes < served.gzipSize)
                await device.close()
            }
        }
    }
}
