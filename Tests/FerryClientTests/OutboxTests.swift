import FerryCore
import Foundation
import Testing

@testable import FerryClient

/// The outbox machinery on real SQLite files, without a server: capture, coalescing, refusal, answers, carry-over.
@Suite struct OutboxTests {
    static let trips = SnapshotMetadata.TableInfo(
        name: "trips", primaryKey: ["id"], columns: ["id", "name", "seats", "luggage", "created_at", "updated_at"],
        writable: true,
        merge: .newestWins, createdColumn: "created_at", updatedColumn: "updated_at", rows: 1)
    static let regions = SnapshotMetadata.TableInfo(
        name: "regions", primaryKey: ["code"], columns: ["code", "label"], writable: false, merge: .newestWins,
        createdColumn: nil, updatedColumn: nil, rows: 1)
    static let rowID = "6f1c2a9e-0b7d-4c1e-9a55-3d2f8e7b1c00"
    static let serverTime = "2018-04-29T11:21:02.000Z"

    /// A snapshot-shaped database: the thesis' trips row plus a read-only table.
    func makeDatabase(_ dir: TemporaryDirectory, _ name: String = "database.db", seats: Int64 = 0) throws
        -> SQLiteConnection
    {
        let db = try SQLiteConnection(path: dir.appending(name).path)
        try db.execute(
            """
            CREATE TABLE trips(id TEXT PRIMARY KEY, name TEXT, seats INTEGER, luggage INTEGER, created_at TEXT, updated_at TEXT);
            CREATE TABLE regions(code TEXT PRIMARY KEY, label TEXT);
            INSERT INTO regions VALUES ('se', 'Sweden');
            """)
        try db.run(
            "INSERT INTO trips VALUES (?, 'Växjö-Kalmar', ?, 0, ?, ?)",
            [.text(Self.rowID), .integer(seats), .text(Self.serverTime), .text(Self.serverTime)])
        try SnapshotMetadata(
            dataset: "trips", version: 1, schemaVersion: 1, createdAt: Self.serverTime,
            tables: [Self.trips, Self.regions]
        ).write(to: db)
        try OutboxSchema.install(on: db, tables: [Self.trips, Self.regions])
        return db
    }

    func entries(_ db: SQLiteConnection) throws -> [[SQLiteValue]] {
        try db.query("SELECT op, key, vals, baseUpdatedAt, sent FROM ferry_outbox ORDER BY seq")
    }

    @Test func installingAgainWritesNothingUnlessSomethingChanged() throws {
        // Given a database whose outbox schema is installed with its published checksum
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = try makeDatabase(dir)
        let origin = String(repeating: "a", count: 64)
        try OutboxSchema.install(on: db, tables: [Self.trips, Self.regions], origin: origin)
        let file = dir.appending("database.db")
        let installed = try Data(contentsOf: file)

        // When every open installs again, the file's bytes (its change counter included) stay as they are
        for _ in 0..<3 { try OutboxSchema.install(on: db, tables: [Self.trips, Self.regions], origin: origin) }
        #expect(try Data(contentsOf: file) == installed)

        // And another origin or a dropped trigger is installed as before
        let next = String(repeating: "b", count: 64)
        try OutboxSchema.install(on: db, tables: [Self.trips, Self.regions], origin: next)
        #expect(OutboxSchema.origin(of: db) == next)
        try db.execute("DROP TRIGGER ferry_trips_upd")
        try OutboxSchema.install(on: db, tables: [Self.trips, Self.regions], origin: next)
        #expect(
            try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name = 'ferry_trips_upd'")?
                .integer == 1)
    }

    @Test func updatesAreCapturedWithTheServerBaseAndCoalesced() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = try makeDatabase(dir)
        // When the row is edited twice offline
        try db.run("UPDATE trips SET seats = 1 WHERE id = ?", [.text(Self.rowID)])
        try db.run("UPDATE trips SET luggage = 2 WHERE id = ?", [.text(Self.rowID)])
        // Then one update carries both changed columns and the server's updated_at as its base
        let rows = try entries(db)
        #expect(rows.count == 1)
        #expect(rows[0][0] == "update")
        #expect(rows[0][1] == .text(#"{"id":"\#(Self.rowID)"}"#))
        let values = try JSONDecoder().decode([String: JSONValue].self, from: Data(rows[0][2].text!.utf8))
        #expect(values == ["seats": .int(1), "luggage": .int(2)])
        #expect(rows[0][3] == .text(Self.serverTime))
        // And the local row shows the edit at once, stamped with the local clock
        let local = try db.query("SELECT seats, luggage, updated_at FROM trips")[0]
        #expect(local[0] == 1 && local[1] == 2)
        #expect(local[2].text! > Self.serverTime)
        #expect(try Outbox.count(in: db) == 1)
    }

    @Test func editsAfterAnUploadStartAreNotCoalescedIntoIt() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = try makeDatabase(dir)
        try db.run("UPDATE trips SET seats = 1 WHERE id = ?", [.text(Self.rowID)])
        let batch = try Outbox.takeBatch(from: db, limit: 500)
        #expect(batch.count == 1)
        // When the row changes again while the first change is in flight
        try db.run("UPDATE trips SET seats = 2 WHERE id = ?", [.text(Self.rowID)])
        // Then a second change is queued, still based on the server's updated_at, not the local stamp
        let rows = try entries(db)
        #expect(rows.count == 2)
        #expect(rows[1][3] == .text(Self.serverTime))
        // And a retry of the batch resends the first change with the same id
        #expect(try Outbox.takeBatch(from: db, limit: 1).map(\.id) == batch.map(\.id))
    }

    @Test func insertThenDeleteBeforeUploadLeavesNothing() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = try makeDatabase(dir)
        let id = UUID().uuidString.lowercased()
        try db.run("INSERT INTO trips(id, name, seats, luggage) VALUES (?, 'Kalmar-Växjö', 3, 1)", [.text(id)])
        let inserted = try entries(db)
        #expect(inserted.count == 1 && inserted[0][0] == "insert" && inserted[0][3] == .null)
        // created_at/updated_at were stamped locally
        #expect(
            try db.scalar(
                "SELECT created_at IS NOT NULL AND created_at = updated_at FROM trips WHERE id = ?", [.text(id)]) == 1)
        try db.run("UPDATE trips SET seats = 4 WHERE id = ?", [.text(id)])
        #expect(try entries(db).count == 1)
        try db.run("DELETE FROM trips WHERE id = ?", [.text(id)])
        #expect(try entries(db).isEmpty)
    }

    @Test func deleteOfAServerRowIsQueuedWithItsBase() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = try makeDatabase(dir)
        try db.run("UPDATE trips SET seats = 5 WHERE id = ?", [.text(Self.rowID)])
        try db.run("DELETE FROM trips WHERE id = ?", [.text(Self.rowID)])
        let rows = try entries(db)
        #expect(rows.count == 1)
        #expect(rows[0][0] == "delete" && rows[0][3] == .text(Self.serverTime))
    }

    @Test func readOnlyTablesAndNonUUIDKeysAreRefused() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = try makeDatabase(dir)
        #expect(throws: FerryError.self) { try db.run("UPDATE regions SET label = 'x'") }
        #expect(throws: FerryError.self) { try db.run("INSERT INTO trips(id, name) VALUES ('1', 'x')") }
        #expect(throws: FerryError.self) {
            try db.run("UPDATE trips SET id = ? WHERE id = ?", [.text(UUID().uuidString), .text(Self.rowID)])
        }
        // Nothing was half-recorded
        #expect(try entries(db).isEmpty)
        #expect(try db.scalar("SELECT label FROM regions") == "Sweden")
    }

    @Test func answersWriteTheWinnerAndKeepNewerLocalEdits() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = try makeDatabase(dir)
        try db.run("UPDATE trips SET seats = 1 WHERE id = ?", [.text(Self.rowID)])
        let batch = try Outbox.takeBatch(from: db, limit: 500)
        try db.run("UPDATE trips SET luggage = 7 WHERE id = ?", [.text(Self.rowID)])
        // When the server rejects the first change (server wins) and returns its row
        let winner: [String: JSONValue] = [
            "id": .string(Self.rowID), "name": .string("Växjö-Kalmar"), "seats": .int(0), "luggage": .int(0),
            "created_at": .string(Self.serverTime), "updated_at": .string("2018-04-29T11:45:05.000Z"),
        ]
        let summary = try Outbox.record(
            [ChangeResult(id: batch[0].id, status: .rejected, row: winner, message: nil)], for: batch, in: db,
            tables: [Self.trips, Self.regions])
        #expect(summary.rejected == 1)
        // Then the server's seats win, the newer local luggage edit stays visible and queued on the new base
        let local = try db.query("SELECT seats, luggage FROM trips")[0]
        #expect(local == [.integer(0), .integer(7)])
        let rows = try entries(db)
        #expect(rows.count == 1 && rows[0][3] == .text("2018-04-29T11:45:05.000Z"))
        // Writing the winner was not itself captured as an edit
        #expect(try Outbox.count(in: db) == 1)
    }

    @Test func goneRemovesTheRowAndUnansweredStayQueued() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = try makeDatabase(dir)
        try db.run("UPDATE trips SET seats = 1 WHERE id = ?", [.text(Self.rowID)])
        let id = UUID().uuidString.lowercased()
        try db.run("INSERT INTO trips(id, name, seats, luggage) VALUES (?, 'Kalmar-Växjö', 3, 1)", [.text(id)])
        let batch = try Outbox.takeBatch(from: db, limit: 500)
        #expect(batch.count == 2)
        let summary = try Outbox.record(
            [ChangeResult(id: batch[0].id, status: .gone, row: nil, message: "deleted on the server")], for: batch,
            in: db,
            tables: [Self.trips, Self.regions])
        #expect(summary.gone == 1 && summary.unanswered == 1)
        #expect(try db.scalar("SELECT count(*) FROM trips WHERE id = ?", [.text(Self.rowID)]) == 0)
        #expect(try Outbox.count(in: db) == 1)
    }

    @Test func carryOverReplaysPendingEditsOnANewSnapshot() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let live = try makeDatabase(dir)
        try live.run("UPDATE trips SET seats = 1 WHERE id = ?", [.text(Self.rowID)])
        let id = UUID().uuidString.lowercased()
        try live.run("INSERT INTO trips(id, name, seats, luggage) VALUES (?, 'Kalmar-Växjö', 3, 1)", [.text(id)])
        try live.run("DELETE FROM trips WHERE id = ?", [.text(Self.rowID)])  // replaces the queued update
        // Given a fresh snapshot where the server changed the row meanwhile (seats = 9)
        let fresh = try SQLiteConnection(path: dir.appending("updated.db").path)
        try fresh.execute(
            """
            CREATE TABLE trips(id TEXT PRIMARY KEY, name TEXT, seats INTEGER, luggage INTEGER, created_at TEXT, updated_at TEXT);
            CREATE TABLE regions(code TEXT PRIMARY KEY, label TEXT);
            """)
        try fresh.run(
            "INSERT INTO trips VALUES (?, 'Växjö-Kalmar', 9, 0, ?, ?)",
            [.text(Self.rowID), .text(Self.serverTime), .text("2018-04-29T11:45:05.000Z")])
        // When the queue is carried over
        try Outbox.carryOver(
            fromLiveDatabaseAt: dir.appending("database.db").path, into: fresh, tables: [Self.trips, Self.regions])
        // Then the local insert and delete are visible on top of the new data, and still queued
        #expect(try fresh.scalar("SELECT count(*) FROM trips WHERE id = ?", [.text(Self.rowID)]) == 0)
        #expect(try fresh.scalar("SELECT seats FROM trips WHERE id = ?", [.text(id)]) == 3)
        #expect(try Outbox.count(in: fresh) == 2)
        // And capture works on the new file
        try fresh.run("UPDATE trips SET seats = 4 WHERE id = ?", [.text(id)])
        #expect(try Outbox.count(in: fresh) == 2)
    }

    @Test("carrying over from a device with nothing queued is a no-op; one queued edit is carried")
    func carryOverWithNothingQueuedIsANoOp() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        _ = try makeDatabase(dir)  // database.db with the outbox installed and nothing queued
        let livePath = dir.appending("database.db").path
        func freshSnapshot(_ name: String) throws -> SQLiteConnection {
            let fresh = try SQLiteConnection(path: dir.appending(name).path)
            try fresh.execute(
                """
                CREATE TABLE trips(id TEXT PRIMARY KEY, name TEXT, seats INTEGER, luggage INTEGER, created_at TEXT, updated_at TEXT);
                CREATE TABLE regions(code TEXT PRIMARY KEY, label TEXT);
                """)
            try fresh.run(
                "INSERT INTO trips VALUES (?, 'Växjö-Kalmar', 0, 0, ?, ?)",
                [.text(Self.rowID), .text(Self.serverTime), .text(Self.serverTime)])
            try OutboxSchema.install(on: fresh, tables: [Self.trips, Self.regions], origin: nil)
            return fresh
        }
        func nothingQueued(_ fresh: SQLiteConnection) throws -> Bool {
            try fresh.run("ATTACH DATABASE ? AS live", [.text(livePath)])
            defer { try? fresh.execute("DETACH DATABASE live") }
            return try Outbox.nothingQueued(fresh)
        }
        // Nothing queued: the check says so, and the carry-over leaves the new file's tables and queue as they were.
        let quiet = try freshSnapshot("quiet.db")
        #expect(try nothingQueued(quiet))
        try Outbox.carryOver(fromLiveDatabaseAt: livePath, into: quiet, tables: [Self.trips, Self.regions])
        #expect(try Outbox.count(in: quiet) == 0)
        #expect(try quiet.scalar("SELECT seats FROM trips WHERE id = ?", [.text(Self.rowID)]) == 0)

        // One queued edit on the live file: the check says no, and the edit is carried and replayed.
        let live = try SQLiteConnection(path: livePath)
        try live.run("UPDATE trips SET seats = 5 WHERE id = ?", [.text(Self.rowID)])
        let busy = try freshSnapshot("busy.db")
        #expect(try !nothingQueued(busy))
        try Outbox.carryOver(fromLiveDatabaseAt: livePath, into: busy, tables: [Self.trips, Self.regions])
        #expect(try Outbox.count(in: busy) == 1)
        #expect(try busy.scalar("SELECT seats FROM trips WHERE id = ?", [.text(Self.rowID)]) == 5)
        // A new file that holds a queued edit of its own (a rollback's previous.db) is not a no-op either.
        try busy.run("UPDATE trips SET seats = 6 WHERE id = ?", [.text(Self.rowID)])
        try live.run("DELETE FROM ferry_outbox")
        #expect(try !nothingQueued(busy))
    }
}

@Suite struct LocalStatementTests {
    @Test func runsOneStatementAndReportsTriggerRefusalsPlainly() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = try OutboxTests().makeDatabase(dir)
        let select = try LocalStatement.run("SELECT name, seats FROM trips", on: db)
        #expect(select.columns == ["name", "seats"])
        #expect(select.rows == [["Växjö-Kalmar", 0]])
        let update = try LocalStatement.run("UPDATE trips SET seats = 1;", on: db)
        #expect(update.changes == 1 && update.columns.isEmpty)
        #expect(try Outbox.count(in: db) == 1)
        #expect(throws: FerryError.self) { try LocalStatement.run("SELECT 1; SELECT 2", on: db) }
        do {
            _ = try LocalStatement.run("DELETE FROM regions", on: db)
            Issue.record("a write to a read-only table must fail")
        } catch let error as FerryError {
            #expect(error.message.hasPrefix("table regions is read-only"))
        }
    }
}

@Suite struct MetadataProtectionTests {
    @Test func snapshotMetadataIsReadOnlyButTheLibraryCanStillRecordItsOrigin() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = try OutboxTests().makeDatabase(dir)
        try OutboxSchema.install(
            on: db, tables: [OutboxTests.trips, OutboxTests.regions], origin: String(repeating: "a", count: 64))
        #expect(throws: FerryError.self) { try LocalStatement.run("DELETE FROM ferry_snapshot", on: db) }
        #expect(throws: FerryError.self) { try LocalStatement.run("UPDATE ferry_tables SET writable = 1", on: db) }
        #expect(throws: FerryError.self) { try LocalStatement.run("DELETE FROM ferry_origin", on: db) }
        // Re-installing (each open does) may rewrite the origin
        try OutboxSchema.install(
            on: db, tables: [OutboxTests.trips, OutboxTests.regions], origin: String(repeating: "b", count: 64))
        #expect(OutboxSchema.origin(of: db) == String(repeating: "b", count: 64))
        #expect(try SnapshotMetadata.read(from: db).version == 1)
    }
}
