import FerryCore
import FerryGRDB
import Foundation
import GRDB
import Logging
import Testing

@testable import FerryClient

/// FerryGRDB on a partitioned directory whose streams are already on the device (made by hand) while the server is
/// unreachable: the composition is applied in place under the app's pool, the stream errors are still reported, and
/// the pool refuses an insert outside the subscribed partitions.
@Suite struct FerryDatabasePartitionTests {
    typealias Fixture = PartitionStreamFixture

    @Test func theStreamsOnTheDeviceAreComposedInPlaceWhileOffline() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let directory = ClientDirectory(dir.url)
        try Fixture.write(directory.directory(of: .shared).database, project: nil)
        try Fixture.write(directory.directory(of: .partition("1")).database, project: 1)
        var subscriptions = Subscriptions(dataset: "projects", layout: Fixture.layout)
        subscriptions.subscribe(["1"])
        try subscriptions.save(to: directory.subscriptionsFile)
        // Nothing listens on port 9: every stream's check is offline.
        let configuration = FerryClient.Configuration(
            directory: dir.url, serverURL: URL(string: "http://127.0.0.1:9")!, dataset: "projects")
        let ferry = try await FerryDatabase.open(
            configuration: configuration, applyMode: .automatic, logger: Logger(label: "test"))

        #expect(await ferry.subscriptions == ["1"])
        await #expect(throws: FerryError.self) { try await ferry.checkForUpdates() }

        let sites = try await ferry.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM sites") }
        #expect(sites == 2)
        let items = try await ferry.pool.read { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM checklist_items")
        }
        #expect(items == 2)
        await #expect(throws: DatabaseError.self) {
            try await ferry.pool.write { db in
                try db.execute(sql: "INSERT INTO sites VALUES (?, 2, 'elsewhere')", arguments: [Fixture.id(250)])
            }
        }
        try await ferry.pool.write { db in
            try db.execute(sql: "INSERT INTO sites VALUES (?, 1, 'here')", arguments: [Fixture.id(150)])
        }
        #expect(try await ferry.client.status().outbox == 1)
        try await ferry.unsubscribe(["1"])
        #expect(await ferry.subscriptions.isEmpty)
        try await ferry.close()
    }
}
