import FerryCore
import FerryTestSupport
import Foundation
import Testing

/// `Changeset.newTextValues(in:)`: the values a step writes into attachment columns, by position.
@Suite struct ChangesetNewValuesTests {
    @Test("inserts and updates give their new values of the named columns; deletes and untouched columns give none")
    func newValues() throws {
        let dir = try TemporaryDirectory("changeset-values")
        defer { dir.remove() }
        func file(_ name: String, _ rows: [(Int64, String?, String?)]) throws -> URL {
            let url = dir.appending("\(name).sqlite")
            let db = try SQLiteConnection(path: url.path)
            try db.execute("CREATE TABLE photos(id INTEGER PRIMARY KEY, image TEXT, caption TEXT)")
            for row in rows {
                _ = try db.run(
                    "INSERT INTO photos VALUES (?, ?, ?)",
                    [.integer(row.0), row.1.map { .text($0) } ?? .null, row.2.map { .text($0) } ?? .null])
            }
            return url
        }
        let old = try file("old", [(1, "a", "x"), (2, "b", "y"), (3, "c", "z"), (4, nil, "w")])
        let new = try file("new", [(1, "a", "changed"), (2, "b2", "y"), (4, nil, "w"), (5, "e", "v"), (6, nil, "n")])
        let step = try Changeset.diff(from: old, to: new, tables: ["photos"])
        // Row 1's image is unchanged (no new value), row 2's changed, row 3 deleted, row 5 inserted, row 6 NULL.
        #expect(try step.newTextValues(in: ["photos": [1]]) == ["b2", "e"])
        #expect(try step.newTextValues(in: ["photos": [2]]) == ["changed", "v", "n"])
        #expect(try step.newTextValues(in: ["other": [1]]) == [])
        #expect(try Changeset(data: Data()).newTextValues(in: ["photos": [1]]) == [])
    }
}
