import FerryCore
import Foundation
import Testing

@testable import FerryClient

/// A client directory on a full disk: a download and an offline edit each exit 1 saying the disk is full and
/// where, database.db and the queue stay as they were, and the next run after space is freed succeeds.
@Suite struct ClientDiskFullTests {
    @Test func fetchOnAFullDisk() async throws {
        let temp = try TemporaryDirectory("client-diskfull")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        let v1 = try fixtures.publish(rows: 5)
        let disk = try SmallDisk(megabytes: 24)
        defer { disk.unmount() }
        let dir = disk.url.appendingPathComponent("device").path

        try await withFerryServer(store: fixtures.store.root) { url, waitForVersion in
            let fetch = ["fetch", "--server", url.absoluteString, "--dataset", "trips", "--dir", dir, "--apply"]
            let first = try await runFerryOffPool(fetch)
            #expect(first.status == 0, "\(first.stderr)")

            // When version 2 is larger than the space left
            let v2 = try fixtures.publish(rows: 5, blobMiB: 8)
            try await waitForVersion(2)
            try disk.fill(leaving: 2 << 20)
            let failed = try await runFerryOffPool(fetch)

            // Then fetch exits 1 saying the disk is full, and database.db is still version 1
            #expect(failed.status == 1)
            #expect(failed.stderr.contains("disk is full") && failed.stderr.contains(dir), "\(failed.stderr)")
            let database = URL(fileURLWithPath: dir).appendingPathComponent("database.db")
            #expect(try publishedVersion(of: database, among: [v1, v2]) == 1)
            #expect(!FileManager.default.fileExists(atPath: URL(fileURLWithPath: dir).appendingPathComponent("updated.db").path))

            // And once space is freed, the download completes and applies
            try disk.free()
            let next = try await runFerryOffPool(fetch)
            #expect(next.status == 0, "\(next.stderr)")
            #expect(try publishedVersion(of: database, among: [v1, v2]) == 2)
        }
    }

    /// A one-table snapshot whose table devices may edit.
    static func writableSnapshot(at url: URL) throws {
        let db = try SQLiteConnection(path: url.path)
        try db.transaction {
            try db.execute("CREATE TABLE trips(id TEXT PRIMARY KEY, name TEXT NOT NULL, seats INTEGER NOT NULL)")
            try db.execute("INSERT INTO trips VALUES ('7a1f6c1e-2d7b-4c55-9a7e-0c5d7e1b0001', 'Växjö-Kalmar', 0)")
            let table = SnapshotMetadata.TableInfo(
                name: "trips", primaryKey: ["id"], columns: ["id", "name", "seats"], writable: true, merge: .newestWins,
                createdColumn: nil, updatedColumn: nil, rows: 1)
            try SnapshotMetadata(dataset: "trips", version: 1, schemaVersion: 1, createdAt: Timestamp.format(Date()), tables: [table]).write(to: db)
        }
    }

    @Test func editOnAFullDisk() async throws {
        let disk = try SmallDisk(megabytes: 8)
        defer { disk.unmount() }
        let dir = disk.url.appendingPathComponent("device")
        try DurableFile.makeDirectory(dir)
        try Self.writableSnapshot(at: dir.appendingPathComponent("database.db"))
        let edit = { (seats: Int) in ["exec", "--dir", dir.path, "UPDATE trips SET seats = \(seats) WHERE name = 'Växjö-Kalmar'"] }
        let seats = { () throws -> Int64? in
            try SQLiteConnection(path: dir.appendingPathComponent("database.db").path, mode: .readOnly).scalar("SELECT seats FROM trips")?.integer
        }
        let first = try await runFerryOffPool(edit(1))
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try await runFerryOffPool(["status", "--dir", dir.path, "--json"]).stdout.contains(#""outbox":1"#))

        // When the disk is full, an edit exits 1 saying so, and neither the row nor the queue changed
        try disk.fill(leaving: 0)
        let failed = try await runFerryOffPool(edit(2))
        #expect(failed.status == 1)
        #expect(failed.stderr.contains("disk is full") && failed.stderr.contains(dir.path), "\(failed.stderr)")
        #expect(try seats() == 1)

        // And once space is freed, the edit goes through and is queued
        try disk.free()
        let next = try await runFerryOffPool(edit(3))
        #expect(next.status == 0, "\(next.stderr)")
        #expect(try seats() == 3)
        #expect(try await runFerryOffPool(["status", "--dir", dir.path, "--json"]).stdout.contains(#""outbox":1"#))
    }
}
