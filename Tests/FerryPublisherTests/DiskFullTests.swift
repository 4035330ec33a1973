import FerryCore
import FerryStore
import Foundation
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

/// A publish that runs out of disk space: exit 1 naming the disk and the place, the previous version intact, and
/// the next run after space is freed succeeds. On a real small file system (a tmpfs).
@Suite("Publisher: disk full")
struct PublishDiskFullTests {
    @Test func publishOnAFullDisk() async throws {
        let fixture = try PublisherFixture(
            "diskfull",
            sql:
                "CREATE TABLE big (id integer PRIMARY KEY, pad text NOT NULL); INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 100) g;"
        )
        defer { fixture.cleanUp() }
        let disk = try SmallDisk(megabytes: 32)
        defer { disk.unmount() }
        let store = disk.url.appendingPathComponent("store")
        let template = try fixture.writeTemplate("dataset: full\ntables: [{name: big}]\n")
        let args = ["publish", "--config", template, "--database-url", fixture.database.url, "--store", store.path]
        let first = try await runFerry(args)
        #expect(first.status == 0, "\(first.stderr)")
        let storeAccess = FileSnapshotStore(root: store)
        let v1 = try #require(try storeAccess.manifest(for: "full"))

        // When the data grows past the space left
        try await offCooperativePool {
            try fixture.execute("INSERT INTO big SELECT g, repeat(md5(g::text), 8) FROM generate_series(101, 40000) g")
        }
        try disk.fill(leaving: 1 << 20)
        let failed = try await runFerry(args)

        // Then ferry publish exits 1 saying the disk is full and where; version 1 is served as before
        #expect(failed.status == 1)
        #expect(failed.stderr.contains("disk is full") && failed.stderr.contains(disk.url.path), "\(failed.stderr)")
        #expect(try storeAccess.manifest(for: "full") == v1)
        #expect(try FileDigest.sha256Hex(of: storeAccess.snapshotURL(dataset: "full", version: 1)) == v1.sha256)

        // And once space is freed, the next run cleans up and publishes version 2
        try disk.free()
        let next = try await runFerry(args)
        #expect(next.status == 0, "\(next.stderr)")
        #expect(try storeAccess.manifest(for: "full")?.version == 2)
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: storeAccess.temporaryDirectory(dataset: "full").path)
                .isEmpty)
    }
}
