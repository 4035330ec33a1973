import FerryCore
import Foundation
import Testing

@testable import FerryClient

/// The patch path's core on real snapshot files: clone, apply, describe, verify; never a wrong database.
@Suite struct PatchApplierTests {
    /// Versions 1 and 2 of trips, a device database at version 1 as the client opens it, and the patch 1 → 2.
    struct World {
        let temp: TemporaryDirectory
        let fixtures: SnapshotFixtures
        let v1: Manifest
        let v2: Manifest
        let device: URL
        let patch: Changeset
        var target: URL { temp.appending("updated.db") }

        init(rows: Int = 8) throws {
            temp = try TemporaryDirectory("patch-applier")
            fixtures = SnapshotFixtures(root: temp.appending("store"))
            v1 = try fixtures.publish(rows: rows)
            v2 = try fixtures.publish(rows: rows + 2)
            device = temp.appending("database.db")
            try FileManager.default.copyItem(at: try fixtures.snapshotFile(1), to: device)
            let db = try SQLiteConnection(path: device.path, mode: .readWrite)
            try OutboxSchema.install(on: db, tables: try SnapshotMetadata.read(from: db).tables, origin: v1.sha256)
            patch = try Changeset.diff(
                from: try fixtures.snapshotFile(1), to: try fixtures.snapshotFile(2),
                tables: ["trips", "blobs", "ferry_tables"])
        }

        func rows(_ url: URL) throws -> [[SQLiteValue]] {
            let db = try SQLiteConnection(path: url.path, mode: .readOnly)
            return try db.query("SELECT * FROM trips ORDER BY id")
                + db.query("SELECT name, rows FROM ferry_tables ORDER BY name")
        }
    }

    @Test("a device without local edits gets exactly the new version's rows and description")
    func cleanDevice() throws {
        let world = try World()
        defer { world.temp.remove() }
        let outcome = try PatchApplier.build(
            live: world.device, into: world.target, patch: world.patch, expected: world.v2.current)
        #expect(outcome.ownRowsSettled == 0)
        #expect(try world.rows(world.target) == world.rows(try world.fixtures.snapshotFile(2)))
        let db = try SQLiteConnection(path: world.target.path, mode: .readOnly)
        let metadata = try SnapshotMetadata.read(from: db)
        #expect(metadata.version == 2 && metadata.createdAt == world.v2.createdAt)
        #expect(OutboxSchema.origin(of: db) == world.v2.sha256)
        try db.checkIntegrity()
        // The live database is untouched.
        #expect(try world.rows(world.device) == world.rows(try world.fixtures.snapshotFile(1)))
        #expect(try publishedVersion(of: world.target, among: [world.v1, world.v2]) == 2)
    }

    @Test("a device whose data diverged from its version gets an error and no file, never a wrong database")
    func divergedDevice() throws {
        let world = try World()
        defer { world.temp.remove() }
        // Given a row changed behind the outbox's back (capture off, no queue)
        let db = try SQLiteConnection(path: world.device.path, mode: .readWrite)
        try Outbox.setCapture(false, db)
        try db.execute("UPDATE trips SET name = 'tampered' WHERE id = 't1'")
        try Outbox.setCapture(true, db)
        #expect(throws: FerryError.self) {
            try PatchApplier.build(
                live: world.device, into: world.target, patch: world.patch, expected: world.v2.current)
        }
        #expect(!FileManager.default.fileExists(atPath: world.target.path))
    }

    @Test("a truncated patch or one for another version leaves no file")
    func badPatches() throws {
        let world = try World()
        defer { world.temp.remove() }
        let truncated = Changeset(data: world.patch.data.prefix(world.patch.data.count / 2))
        #expect(throws: FerryError.self) {
            try PatchApplier.build(live: world.device, into: world.target, patch: truncated, expected: world.v2.current)
        }
        #expect(!FileManager.default.fileExists(atPath: world.target.path))
        // A patch 2 → 3 applied to version 1: its rows are not what it expects
        let v3 = try world.fixtures.publish(rows: 12)
        let wrong = try Changeset.diff(
            from: try world.fixtures.snapshotFile(2), to: try world.fixtures.snapshotFile(3),
            tables: ["trips", "blobs", "ferry_tables"])
        #expect(throws: FerryError.self) {
            try PatchApplier.build(live: world.device, into: world.target, patch: wrong, expected: v3.current)
        }
        #expect(!FileManager.default.fileExists(atPath: world.target.path))
    }

    @Test("a result whose rows do not add up to the published content digest is refused and leaves no file")
    func contentDigestMismatch() throws {
        let world = try World()
        defer { world.temp.remove() }
        let published = try ContentDigest.compute(
            SQLiteConnection(path: try world.fixtures.snapshotFile(2).path, mode: .readOnly),
            tables: ["trips", "blobs"])
        var expected = world.v2.current
        expected.contentDigest = published.description
        // The right digest passes
        _ = try PatchApplier.build(live: world.device, into: world.target, patch: world.patch, expected: expected)
        try FileManager.default.removeItem(at: world.target)
        // A digest one off (rows that differ in a way row counts cannot see) fails, naming both digests
        var other = published
        other.add(ContentDigest(hex: String(repeating: "0", count: 63) + "1")!)
        expected.contentDigest = other.description
        let error = #expect(throws: FerryError.self) {
            try PatchApplier.build(live: world.device, into: world.target, patch: world.patch, expected: expected)
        }
        #expect(error?.message.contains("content digest is \(published)") == true, "\(String(describing: error))")
        #expect(!FileManager.default.fileExists(atPath: world.target.path))
    }
}

extension PatchApplierTests {
    @Test(
        "moved row by row from the base's digest, the check agrees with a full read, and still sees a column the patch did not change"
    )
    func digestMovedFromTheBase() throws {
        let world = try World()
        defer { world.temp.remove() }
        let tables = ["trips", "blobs"]
        let base = try ContentDigest.compute(
            SQLiteConnection(path: try world.fixtures.snapshotFile(1).path, mode: .readOnly), tables: tables)
        var expected = world.v2.current
        expected.contentDigest = try ContentDigest.compute(
            SQLiteConnection(path: try world.fixtures.snapshotFile(2).path, mode: .readOnly), tables: tables
        )
        .description
        #expect(try world.patch.touchedRows()["trips"]?.keys.count == 10)
        _ = try PatchApplier.build(
            live: world.device, into: world.target, patch: world.patch, expected: expected, baseDigest: base.description
        )
        try FileManager.default.removeItem(at: world.target)

        // Given a row the patch updates, diverged in a column the patch does not change (no conflict can see that)
        let db = try SQLiteConnection(path: world.device.path, mode: .readWrite)
        try Outbox.setCapture(false, db)
        try db.execute("UPDATE trips SET seats = 1000 WHERE id = 't1'")
        try Outbox.setCapture(true, db)
        for baseDigest in [base.description, nil] {
            let error = #expect(throws: FerryError.self) {
                try PatchApplier.build(
                    live: world.device, into: world.target, patch: world.patch, expected: expected,
                    baseDigest: baseDigest)
            }
            #expect(error?.message.contains("content digest") == true, "\(String(describing: error))")
            #expect(!FileManager.default.fileExists(atPath: world.target.path))
        }
    }
}

/// The content digest: a sum of row hashes, independent of row order and page layout, moved by adding and removing
/// rows.
@Suite struct ContentDigestTests {
    @Test func orderIndependentAndMovedByAddingAndRemovingRows() throws {
        let temp = try TemporaryDirectory("content-digest")
        defer { temp.remove() }
        let a = try SQLiteConnection(path: temp.appending("a.db").path)
        let b = try SQLiteConnection(path: temp.appending("b.db").path)
        for db in [a, b] {
            try db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, score REAL, data BLOB, note TEXT)")
        }
        let rows: [[SQLiteValue]] = [
            [.integer(1), .text("Växjö"), .real(1.5), .blob([0, 1]), .null],
            [.integer(2), .text(""), .real(-0.25), .null, .text("x")],
            [.integer(3), .text("1"), .integer(1), .blob([]), .text("")],
        ]
        for row in rows { try a.run("INSERT INTO t VALUES (?, ?, ?, ?, ?)", row) }
        for row in rows.reversed() { try b.run("INSERT INTO t VALUES (?, ?, ?, ?, ?)", row) }
        let digest = try ContentDigest.compute(a, tables: ["t"])
        #expect(try ContentDigest.compute(b, tables: ["t"]) == digest)
        #expect(ContentDigest(hex: digest.description) == digest)
        #expect(ContentDigest(hex: "xyz") == nil)
        #expect(ContentDigest(hex: String(repeating: "A", count: 64)) == nil)  // lowercase hex only, as written
        #expect(ContentDigest(hex: String(digest.description.dropLast())) == nil)
        #expect(ContentDigest(hex: String(digest.description.dropLast()) + "g") == nil)
        #expect(ContentDigest(hex: String(repeating: "f", count: 64))?.description == String(repeating: "f", count: 64))
        #expect(
            ContentDigest(hex: "0123456789abcdef" + String(repeating: "0", count: 47) + "1")?.description
                == "0123456789abcdef" + String(repeating: "0", count: 47) + "1")

        // A changed value changes it; subtracting the old row and adding the new one gives the same digest
        var moved = digest
        try moved.subtract(rowsOf: "t", in: b, where: "WHERE id = ?", [.integer(2)])
        try b.run("UPDATE t SET name = 'Kalmar' WHERE id = 2")
        try moved.add(rowsOf: "t", in: b, where: "WHERE id = ?", [.integer(2)])
        let changed = try ContentDigest.compute(b, tables: ["t"])
        #expect(changed != digest && moved == changed)
        // Values that print alike are different rows: text '1' is not the integer 1, an empty blob is not NULL
        try a.run("UPDATE t SET name = 1 WHERE id = 3")
        #expect(try ContentDigest.compute(a, tables: ["t"]) == digest)  // a TEXT column stores 1 as '1'
        try a.run("UPDATE t SET data = NULL WHERE id = 3")
        #expect(try ContentDigest.compute(a, tables: ["t"]) != digest)
    }
}
