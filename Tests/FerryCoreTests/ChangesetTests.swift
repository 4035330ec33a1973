import FerryCore
import FerryTestSupport
import Foundation
import Testing

/// SQLite session changesets on real files: diff, combine, apply, conflicts.
@Suite struct ChangesetTests {
    let dir: TemporaryDirectory

    init() throws { dir = try TemporaryDirectory("changeset") }

    /// A snapshot-like file: `trips(id TEXT PRIMARY KEY, name, seats)` with the given rows.
    func snapshot(_ name: String, _ rows: [(String, String, Int)]) throws -> URL {
        let url = dir.appending("\(name).sqlite")
        let db = try SQLiteConnection(path: url.path)
        try db.execute("CREATE TABLE trips(id TEXT PRIMARY KEY, name TEXT NOT NULL, seats INTEGER NOT NULL)")
        try db.transaction {
            for row in rows {
                try db.run("INSERT INTO trips VALUES (?, ?, ?)", [.text(row.0), .text(row.1), .integer(Int64(row.2))])
            }
        }
        return url
    }

    func rows(_ url: URL) throws -> [[SQLiteValue]] {
        try SQLiteConnection(path: url.path, mode: .readOnly).query("SELECT id, name, seats FROM trips ORDER BY id")
    }

    func copy(_ url: URL, _ name: String) throws -> URL {
        let target = dir.appending("\(name).sqlite")
        try FileManager.default.copyItem(at: url, to: target)
        return target
    }

    @Test("a diff turns v1 into v2: inserts, updates and deletes; combined diffs skip versions")
    func diffAndCombine() throws {
        defer { dir.remove() }
        // Given three versions with inserts, updates and deletes between them
        let v1 = try snapshot("v1", [("a", "Växjö", 1), ("b", "Kalmar", 2), ("c", "Öland", 3)])
        let v2 = try snapshot("v2", [("a", "Växjö", 5), ("c", "Öland", 3), ("d", "Malmö", 4)])
        let v3 = try snapshot("v3", [("a", "Växjö", 6), ("d", "Malmö", 4), ("e", "Lund", 7)])
        let oneTwo = try Changeset.diff(from: v1, to: v2, tables: ["trips"])
        let twoThree = try Changeset.diff(from: v2, to: v3, tables: ["trips"])
        #expect(!oneTwo.isEmpty && !twoThree.isEmpty)
        #expect(try Changeset.diff(from: v2, to: v2, tables: ["trips"]).isEmpty)

        // When v1's copy gets the v1→v2 diff, it holds v2's rows
        let device = try copy(v1, "device")
        let db = try SQLiteConnection(path: device.path)
        try db.transaction { try oneTwo.apply(to: db) { _ in .abort } }
        #expect(try rows(device) == rows(v2))

        // And a v1 copy given the combined v1→v3 diff holds v3's rows
        let behind = try copy(v1, "behind")
        let combined = try Changeset.combine([oneTwo, twoThree])
        let behindDB = try SQLiteConnection(path: behind.path)
        try behindDB.transaction { try combined.apply(to: behindDB) { _ in .abort } }
        #expect(try rows(behind) == rows(v3))
    }

    @Test(
        "a row that differs from what the patch expects is a conflict: abort leaves the file as it was, replace takes the patch's row"
    )
    func conflicts() throws {
        defer { dir.remove() }
        let v1 = try snapshot("v1", [("a", "Växjö", 1), ("b", "Kalmar", 2)])
        let v2 = try snapshot("v2", [("a", "Växjö", 5), ("b", "Kalmar", 2)])
        let patch = try Changeset.diff(from: v1, to: v2, tables: ["trips"])

        // Given a device that edited row a locally
        let device = try copy(v1, "device")
        let db = try SQLiteConnection(path: device.path)
        try db.execute("UPDATE trips SET seats = 9 WHERE id = 'a'")
        let before = try rows(device)

        // When the patch is applied with abort, it throws and nothing changed
        var seen: [Changeset.Conflict] = []
        #expect(throws: FerryError.self) {
            try db.transaction {
                try patch.apply(to: db) {
                    seen.append($0)
                    return .abort
                }
            }
        }
        #expect(seen == [Changeset.Conflict(table: "trips", kind: .data)])
        #expect(try rows(device) == before)

        // When it is applied with replace, the server's row wins
        try db.transaction { try patch.apply(to: db) { _ in .replace } }
        #expect(try rows(device) == rows(v2))
    }

    @Test("a malformed changeset is refused, not applied")
    func malformed() throws {
        defer { dir.remove() }
        let v1 = try snapshot("v1", [("a", "Växjö", 1)])
        let v2 = try snapshot("v2", [("a", "Växjö", 2)])
        var bytes = try Changeset.diff(from: v1, to: v2, tables: ["trips"]).data
        bytes = bytes.prefix(bytes.count / 2)
        let db = try SQLiteConnection(path: try copy(v1, "device").path)
        #expect(throws: FerryError.self) {
            try db.transaction { try Changeset(data: bytes).apply(to: db) { _ in .abort } }
        }
        #expect(throws: FerryError.self) { _ = try Changeset.combine([Changeset(data: bytes)]) }
    }
}
