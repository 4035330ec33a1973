import FerryCore
import FerryGRDB
import Foundation
import GRDB
import Testing

@testable import FerryClient

/// A FerryDatabase in `.automatic` mode with `waitForChanges` long-polls while it is open: each published version
/// reaches the app's pool without the app asking, and close() ends the loop at once.
extension FerryDatabaseTests {
    @Test func automaticModeWithWaitForChangesAppliesEachVersionAsItIsPublished() async throws {
        try await withWorld { world in
            // Given an app open in automatic mode, waiting 50 s per check
            var configuration = world.configuration("watching")
            configuration.download.waitForChanges = .seconds(50)
            let ferry = try await FerryDatabase.open(configuration: configuration, applyMode: .automatic, logger: .test)
            // Then the initial sync arrives by itself
            #expect(try await Self.first(ferry.statusUpdates()) { $0.version == 1 }.state == .upToDate)
            let values = ValueObservation.tracking { db in
                try Int.fetchOne(db, sql: "SELECT passengers FROM trips WHERE name = 'Växjö-Kalmar'")
            }.values(in: ferry.pool)

            // When two versions are published, each reaches the pool without a call from the app
            for passengers in [31, 32] {
                let published = ContinuousClock.now
                _ = try await world.publishChange("passengers = \(passengers)", where: "Växjö-Kalmar")
                #expect(try await Self.first(values, within: 20) { $0 == passengers } == passengers)
                #expect(ContinuousClock.now - published < .seconds(15))
            }
            let status = try await Self.first(ferry.statusUpdates()) { $0.version == 3 }
            #expect(status.state == .upToDate)

            // And close() returns at once, though a long-poll was waiting
            let closing = ContinuousClock.now
            try await ferry.close()
            #expect(ContinuousClock.now - closing < .seconds(10))
        }
    }
}
