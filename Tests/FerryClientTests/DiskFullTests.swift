import FerryCore
import FerryPostgres
import FerryPublisher
import Foundation
import Testing

@testable import FerryClient

#if canImport(Glibc)
    import FerryStore
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A client directory on a full disk: a download, the swap's copy of database.db, the copy a patch is applied to and
/// an offline edit each exit 1 saying the disk is full and where, database.db, previous.db and the queue stay as they
/// were, and the next run after space is freed succeeds.
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
            let first = try await runFerry(fetch)
            #expect(first.status == 0, "\(first.stderr)")

            // When version 2 is larger than the space left
            let v2 = try fixtures.publish(rows: 5, blobMiB: 8)
            try await waitForVersion(2)
            try disk.fill(leaving: 2 << 20)
            let failed = try await runFerry(fetch)

            // Then fetch exits 1 saying the disk is full, and database.db is still version 1
            #expect(failed.status == 1)
            #expect(failed.stderr.contains("disk is full") && failed.stderr.contains(dir), "\(failed.stderr)")
            let database = URL(fileURLWithPath: dir).appendingPathComponent("database.db")
            #expect(try publishedVersion(of: database, among: [v1, v2]) == 1)
            #expect(
                !FileManager.default.fileExists(
                    atPath: URL(fileURLWithPath: dir).appendingPathComponent("updated.db").path))

            // And once space is freed, the download completes and applies
            try disk.free()
            let next = try await runFerry(fetch)
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
            try SnapshotMetadata(
                dataset: "trips", version: 1, schemaVersion: 1, createdAt: Timestamp.format(Date()), tables: [table]
            ).write(to: db)
        }
    }

    @Test func editOnAFullDisk() async throws {
        let disk = try SmallDisk(megabytes: 8)
        defer { disk.unmount() }
        let dir = disk.url.appendingPathComponent("device")
        try DurableFile.makeDirectory(dir)
        try Self.writableSnapshot(at: dir.appendingPathComponent("database.db"))
        let edit = { (seats: Int) in
            ["exec", "--dir", dir.path, "UPDATE trips SET seats = \(seats) WHERE name = 'Växjö-Kalmar'"]
        }
        let seats = { () throws -> Int64? in
            try SQLiteConnection(path: dir.appendingPathComponent("database.db").path, mode: .readOnly).scalar(
                "SELECT seats FROM trips")?.integer
        }
        let first = try await runFerry(edit(1))
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try await runFerry(["status", "--dir", dir.path, "--json"]).stdout.contains(#""outbox":1"#))

        // When the disk is full, an edit exits 1 saying so, and neither the row nor the queue changed
        try disk.fill(leaving: 0)
        let failed = try await runFerry(edit(2))
        #expect(failed.status == 1)
        #expect(failed.stderr.contains("disk is full") && failed.stderr.contains(dir.path), "\(failed.stderr)")
        #expect(try seats() == 1)

        // And once space is freed, the edit goes through and is queued
        try disk.free()
        let next = try await runFerry(edit(3))
        #expect(next.status == 0, "\(next.stderr)")
        #expect(try seats() == 3)
        #expect(try await runFerry(["status", "--dir", dir.path, "--json"]).stdout.contains(#""outbox":1"#))
    }

    /// What "intact" compares: a file's bytes (SHA-256) and modification time.
    struct Fingerprint: Equatable {
        var sha256: String
        var modified: Date
    }

    static func fingerprint(_ file: URL) throws -> Fingerprint {
        let attributes = try FileManager.default.attributesOfItem(atPath: file.path)
        return Fingerprint(
            sha256: sha256Hex(Array(try Data(contentsOf: file))),
            modified: try #require(attributes[.modificationDate] as? Date))
    }

    /// Hard links to `file` in `directory` until the file system refuses one more (`EMLINK`); returns how many.
    static func saturateLinks(of file: URL, in directory: URL) throws -> Int {
        try DurableFile.makeDirectory(directory)
        var made = 0
        while made < 200_000 {
            if link(file.path, directory.appendingPathComponent("\(made)").path) != 0 {
                let code = errno
                guard code == EMLINK else {
                    throw FerryError(.io, "link failed with errno \(code) after \(made) links", path: file.path)
                }
                return made
            }
            made += 1
        }
        throw FerryError(
            .io, "this file system allows more than \(made) links: it cannot make the swap copy", path: file.path)
    }

    /// The swap keeps database.db as previous.db through a hard link; only where `link(2)` fails does it copy
    /// database.db (``ClientDirectory/SwapStep/linkLiveToTemp``), and that copy needs as much space as database.db.
    /// On one file system that accepts links the swap never copies (tmpfs has no link limit, and the rest are
    /// renames), so this test mounts ext2 instead, whose files take at most 65,000 links, and gives database.db all of
    /// them (links in a side directory): `link(2)` fails with `EMLINK` and the swap copies, on the failing run and on
    /// the run after space is freed.
    @Test func applyWhoseCopyOfTheDatabaseRunsOutOfSpace() async throws {
        let temp = try TemporaryDirectory("client-diskfull-swap")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        let v1 = try fixtures.publish(rows: 5, blobMiB: 4)
        let disk = try SmallDisk(megabytes: 40, fileSystem: .ext2)
        defer { disk.unmount() }
        let dir = ClientDirectory(disk.url.appendingPathComponent("device"))

        try await withFerryServer(store: fixtures.store.root) { url, waitForVersion in
            let fetch = ["fetch", "--server", url.absoluteString, "--dataset", "trips", "--dir", dir.url.path]
            #expect(try await runFerry(fetch + ["--apply"]).status == 0)
            let v2 = try fixtures.publish(rows: 6, blobMiB: 4)
            try await waitForVersion(2)
            #expect(try await runFerry(fetch + ["--apply"]).status == 0)
            let v3 = try fixtures.publish(rows: 7, blobMiB: 4)
            try await waitForVersion(3)
            let downloaded = try await runFerry(fetch)
            #expect(downloaded.status == 0, "\(downloaded.stderr)")
            let published = [v1, v2, v3]
            // Given version 2 live, version 1 as previous.db and version 3 pending
            #expect(try publishedVersion(of: dir.database, among: published) == 2)
            #expect(try publishedVersion(of: dir.previous, among: published) == 1)
            #expect(try publishedVersion(of: dir.updated, among: published) == 3)

            // And database.db can take no more links, and less space is free than a copy of it needs
            let links = try Self.saturateLinks(of: dir.database, in: disk.url.appendingPathComponent("links"))
            #expect(links > 30_000)
            let live = try Self.fingerprint(dir.database)
            let previous = try Self.fingerprint(dir.previous)
            let size = try #require(FileIdentity.size(of: dir.database))
            try disk.fill(leaving: size / 2)

            // When the device applies, the copy runs out of space: exit 1, saying so and naming the copy
            let failed = try await runFerry(["apply", "--dir", dir.url.path])
            #expect(failed.status == 1, "\(failed.stderr)")
            #expect(
                failed.stderr.contains("disk is full") && failed.stderr.contains(dir.previousLink.path),
                "\(failed.stderr)")

            // Then database.db and previous.db are as they were, the update is still pending, and no half copy is left
            #expect(try Self.fingerprint(dir.database) == live)
            #expect(try Self.fingerprint(dir.previous) == previous)
            // (updated.db was made ready for the swap, outbox triggers included, before the copy: still version 3)
            #expect(try publishedVersion(of: dir.updated, among: published) == 3)
            #expect(!dir.exists(dir.previousLink))

            // And once space is freed, the apply (copying again: database.db still takes no link) succeeds
            try disk.free()
            let next = try await runFerry(["apply", "--dir", dir.url.path])
            #expect(next.status == 0, "\(next.stderr)")
            #expect(try publishedVersion(of: dir.database, among: published) == 3)
            #expect(try Self.fingerprint(dir.previous).sha256 == live.sha256)
            #expect(
                FileIdentity.of(dir.previous)?.inode
                    != FileIdentity.of(disk.url.appendingPathComponent("links/0"))?.inode)
        }
    }

    /// A patch is applied to a copy of database.db (`.ferry/patched.sqlite`; tmpfs cannot clone, so it is a full
    /// copy): on a disk without room for that copy, fetch exits 1 saying so (and does not fall back to the full
    /// download, which needs at least as much space), and the next fetch after space is freed takes the patch.
    @Test func patchWhoseCopyOfTheDatabaseRunsOutOfSpace() async throws {
        let database = try TestDatabase.create("diskfull-patch")
        let temp = try TemporaryDirectory("client-diskfull-patch")
        defer {
            database.drop()
            temp.remove()
        }
        let root = TestPaths.packageRoot
        try database.connect().execute(
            try String(contentsOf: root.appendingPathComponent("templates/trips.pg.sql"), encoding: .utf8))
        // About 4 MB of rows, so that a copy of database.db is far larger than a patch
        try database.connect().execute(
            """
            INSERT INTO trips (id, name, passengers, bags, "createdAt", "updatedAt")
            SELECT 'row-' || lpad(i::text, 5, '0'), 'Trip ' || i || ' ' || repeat(md5(i::text), 6), i % 7, i % 3, '2026-01-01', '2026-01-01'
            FROM generate_series(1, 16000) AS i
            """)
        let store = temp.appending("store")
        let template = root.appendingPathComponent("templates/trips.yml").path
        let publish = { @Sendable () async throws -> Int in
            try await Publisher(
                configuration: .init(templatePath: template, databaseURL: database.url, store: store, keep: 5),
                logger: .test
            )
            .publish().version
        }
        #expect(try await publish() == 1)
        let disk = try SmallDisk(megabytes: 24)
        defer { disk.unmount() }
        let dir = ClientDirectory(disk.url.appendingPathComponent("device"))

        try await withFerryServer(store: store) { url, waitForVersion in
            let fetch = [
                "fetch", "--server", url.absoluteString, "--dataset", "trips", "--dir", dir.url.path, "--apply",
                "--json",
            ]
            #expect(try await runFerry(fetch).status == 0)
            func change(_ version: Int) async throws {
                try database.connect().execute(
                    "UPDATE trips SET bags = bags + 1, \"updatedAt\" = now() WHERE id <= 'row-00\(version)00'")
                #expect(try await publish() == version)
                try await waitForVersion(version)
            }
            // Given version 2 live (taken as a patch) and version 1 as previous.db, and version 3 published
            try await change(2)
            let second = try await runFerry(fetch)
            #expect(
                second.status == 0 && second.stdout.contains(#""path":"patch","patchFrom":1,"patchTo":2"#),
                "\(second.stdout)\(second.stderr)")
            try await change(3)
            let live = try Self.fingerprint(dir.database)
            let previous = try Self.fingerprint(dir.previous)
            let size = try #require(FileIdentity.size(of: dir.database))
            #expect(size > 2 << 20)

            // When less space is free than a copy of database.db needs (but plenty for the patch)
            try disk.fill(leaving: size / 2)
            let failed = try await runFerry(fetch)

            // Then fetch exits 1 saying the disk is full and naming the copy
            #expect(failed.status == 1, "\(failed.stdout)\(failed.stderr)")
            #expect(
                failed.stderr.contains("disk is full") && failed.stderr.contains(dir.patched.path), "\(failed.stderr)")
            // And database.db and previous.db are as they were, nothing is pending and no half copy is left
            #expect(try Self.fingerprint(dir.database) == live)
            #expect(try Self.fingerprint(dir.previous) == previous)
            #expect(!dir.exists(dir.updated) && !dir.exists(dir.patched))

            // And once space is freed, the next fetch takes the patch to version 3
            try disk.free()
            let next = try await runFerry(fetch)
            #expect(
                next.status == 0 && next.stdout.contains(#""path":"patch","patchFrom":2,"patchTo":3"#),
                "\(next.stdout)\(next.stderr)")
            let status = try await runFerry(["status", "--dir", dir.url.path, "--json"])
            #expect(status.stdout.contains(#""version":3"#), "\(status.stdout)")
        }
    }
}
