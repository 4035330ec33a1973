import FerryCore
import FerryStore
import FerryTestSupport
import Foundation
import Testing

@Suite struct StoreTests {
    /// Makes a small real SQLite file in the store's temp area, as the publisher would.
    func makeSnapshot(_ store: FileSnapshotStore, _ dataset: String, rows: Int) throws -> URL {
        try DurableFile.makeDirectory(store.temporaryDirectory(dataset: dataset))
        let url = store.temporaryDirectory(dataset: dataset).appendingPathComponent("\(UUID().uuidString).sqlite")
        let db = try SQLiteConnection(path: url.path)
        try db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT)")
        for i in 0..<rows { try db.run("INSERT INTO t(name) VALUES (?)", [.text("row \(i)")]) }
        return url
    }

    @Test func commitWritesFilesManifestAndPrunes() throws {
        // Given an empty store
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = FileSnapshotStore(root: dir.url)
        let lock = try store.lock(dataset: "trips", wait: false)
        defer { lock.unlock() }

        // When three versions are committed with keep = 2
        var last: Manifest?
        for rows in 1...3 {
            let version = try store.nextVersion(dataset: "trips")
            let file = try makeSnapshot(store, "trips", rows: rows)
            last = try store.commit(
                dataset: "trips", version: version, snapshot: file, schemaVersion: 1, tables: ["t": rows],
                dataDigest: String(repeating: "a", count: 64), createdAt: Timestamp.format(Date()), keep: 2)
        }

        // Then the manifest names version 3, retains 2 and 3, and version 1's files are gone
        let manifest = try #require(try store.manifest(for: "trips"))
        #expect(manifest == last)
        #expect(manifest.version == 3)
        #expect(manifest.versions == [2, 3])
        #expect(manifest.sha256 == (try FileDigest.sha256Hex(of: store.snapshotURL(dataset: "trips", version: 3))))
        #expect(try store.record(dataset: "trips", version: 1) == nil)
        #expect(try store.objectFileNames(dataset: "trips").count == 4)  // versions 2 and 3, each with its gzip copy
        #expect(try store.record(dataset: "trips", version: 2)?.tables == ["t": 2])
        #expect(try store.datasets() == ["trips"])

        // And the gzip copy decompresses to the snapshot's bytes
        let unzipped = dir.appending("unzipped.sqlite")
        try Gzip.decompressFile(from: store.gzipURL(dataset: "trips", version: 3), to: unzipped)
        #expect(try FileDigest.sha256Hex(of: unzipped) == manifest.sha256)
    }

    @Test func leftoversAreCleanedAndNumbersNeverReused() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = FileSnapshotStore(root: dir.url)
        // Given version 1, then a crash that stored an object no manifest names and left a temp file
        let v1 = try store.commit(
            dataset: "x", version: 1, snapshot: try makeSnapshot(store, "x", rows: 1), schemaVersion: 1,
            tables: ["t": 1],
            dataDigest: String(repeating: "a", count: 64), createdAt: Timestamp.format(Date()), keep: 5)
        _ = try store.storeObject(dataset: "x", file: try makeSnapshot(store, "x", rows: 2), gzipLevel: 1)
        _ = try makeSnapshot(store, "x", rows: 3)
        #expect(try store.objectFileNames(dataset: "x").count == 4)
        // Then cleaning removes the orphan object, its gzip copy and the temp file, and keeps version 1
        #expect(try store.nextVersion(dataset: "x") == 2)
        #expect(try store.cleanLeftovers(dataset: "x") == 3)
        #expect(try store.objectFileNames(dataset: "x") == ["\(v1.sha256).sqlite", "\(v1.sha256).sqlite.gz"])
        #expect(try store.manifest(for: "x") == v1)
    }

    @Test func secondLockFailsClearly() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = FileSnapshotStore(root: dir.url)
        let first = try store.lock(dataset: "x", wait: false)
        defer { first.unlock() }
        // flock locks belong to the open file description, so a second open in the same process conflicts too.
        #expect(throws: FerryError.self) { _ = try store.lock(dataset: "x", wait: false) }
    }

    @Test func manifestRejectsBadFields() throws {
        let bad =
            #"{"dataset":"../x","version":1,"sha256":"zz","size":1,"gzipSize":1,"createdAt":"","schemaVersion":1,"tables":{},"versions":[1]}"#
        #expect(throws: FerryError.self) { _ = try Manifest.decode(Data(bad.utf8)) }
    }

    @Test("a store in the legacy layout (versions/N.sqlite) is read as it is, then migrated by the next publisher")
    func legacyLayoutIsReadThenMigrated() throws {
        // Given a store written by the layout before content addressing, retaining versions 1 and 2
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = FileSnapshotStore(root: dir.url)
        try LegacyStore.commit(
            root: dir.url, dataset: "old", version: 1, snapshot: try makeSnapshot(store, "old", rows: 1),
            tables: ["t": 1], retained: [1])
        let legacy = try LegacyStore.commit(
            root: dir.url, dataset: "old", version: 2, snapshot: try makeSnapshot(store, "old", rows: 2),
            tables: ["t": 2], retained: [1, 2])

        // When it is read as it is
        let read = try store.requireManifest("old")
        // Then the client's manifest is the one the old code served, and the files are the versions/ ones
        #expect(read.isLegacyLayout && !read.scoped && read.lastVersion == 2)
        #expect(try store.manifest(for: "old") == legacy)
        let v2 = try #require(try store.files(dataset: "old", version: 2))
        #expect(v2.snapshot.path.hasSuffix("/old/versions/2.sqlite"))
        #expect(try FileDigest.sha256Hex(of: v2.snapshot) == legacy.sha256)

        // When the publisher's start-up migrates it (under the lock)
        let lock = try store.lock(dataset: "old", wait: false)
        defer { lock.unlock() }
        try store.cleanLeftovers(dataset: "old")

        // Then manifest.json is the new form, the objects hold the same bytes, and versions/ is gone
        let migrated = try store.requireManifest("old")
        #expect(!migrated.isLegacyLayout && migrated.scopes == read.scopes)
        #expect(try store.manifest(for: "old") == legacy)
        for record in migrated.scopes[0].retained {
            let files = store.files(of: record, in: migrated)
            #expect(try FileDigest.sha256Hex(of: files.snapshot) == record.sha256)
            let unzipped = dir.appending("check.sqlite")
            try Gzip.decompressFile(from: files.gzip, to: unzipped)
            #expect(try FileDigest.sha256Hex(of: unzipped) == record.sha256)
            try FileManager.default.removeItem(at: unzipped)
        }
        #expect(!FileManager.default.fileExists(atPath: dir.url.appendingPathComponent("old/versions").path))
        let raw = try #require(FileManager.default.contents(atPath: store.manifestURL(dataset: "old").path))
        #expect(try StoredManifest.decode(raw) == migrated)

        // And the next version continues the numbering
        #expect(try store.nextVersion(dataset: "old") == 3)
    }

    @Test("a migration interrupted after the new manifest is written finishes at the next start-up")
    func interruptedMigrationFinishes() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = FileSnapshotStore(root: dir.url)
        let legacy = try LegacyStore.commit(
            root: dir.url, dataset: "old", version: 1, snapshot: try makeSnapshot(store, "old", rows: 3),
            tables: ["t": 3], retained: [1])
        // Given the objects and the new manifest written, but the crash came before versions/ was deleted
        try store.migrateLegacyLayout(dataset: "old")
        try DurableFile.makeDirectory(dir.url.appendingPathComponent("old/versions"))
        try Data("stale".utf8).write(to: dir.url.appendingPathComponent("old/versions/1.sqlite"))
        // When the next publisher starts, then the leftovers go and the manifest is unchanged
        try store.cleanLeftovers(dataset: "old")
        #expect(!FileManager.default.fileExists(atPath: dir.url.appendingPathComponent("old/versions").path))
        #expect(try store.manifest(for: "old") == legacy)
    }
}
