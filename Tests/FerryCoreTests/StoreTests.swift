import FerryCore
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
        #expect(!FileManager.default.fileExists(atPath: store.snapshotURL(dataset: "trips", version: 1).path))
        #expect(try store.record(dataset: "trips", version: 1) == nil)
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
        // Given a crash that left a renamed but unreferenced version 1 and a temp file
        try DurableFile.makeDirectory(store.versionsDirectory(dataset: "x"))
        let orphan = try makeSnapshot(store, "x", rows: 1)
        try FileManager.default.moveItem(at: orphan, to: store.snapshotURL(dataset: "x", version: 1))
        _ = try makeSnapshot(store, "x", rows: 1)
        // Then the next version skips the orphan's number, and cleaning removes both files
        #expect(try store.nextVersion(dataset: "x") == 2)
        #expect(try store.cleanLeftovers(dataset: "x") == 2)
        #expect(try store.manifest(for: "x") == nil)
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
        let bad = #"{"dataset":"../x","version":1,"sha256":"zz","size":1,"gzipSize":1,"createdAt":"","schemaVersion":1,"tables":{},"versions":[1]}"#
        #expect(throws: FerryError.self) { _ = try Manifest.decode(Data(bad.utf8)) }
    }
}
