import FerryCore
import Foundation
import Testing

@testable import FerryClient

/// The outbox across schema lines (docs/outbox.md, "Schema lines"): the `line` column and its migration, the stamping
/// of queued edits when a swap moves database.db to another line, and a push that sends each line's edits to that
/// line, on real SQLite files.
@Suite struct OutboxLineTests {
    static let rowID = OutboxTests.rowID
    static let serverTime = OutboxTests.serverTime
    /// Line 1's trips; line 2 renamed `luggage` to `bags`.
    static let tripsV1 = OutboxTests.trips
    static let tripsV2 = SnapshotMetadata.TableInfo(
        name: "trips", primaryKey: ["id"], columns: ["id", "name", "seats", "bags", "created_at", "updated_at"],
        writable: true, merge: .serverWins, createdColumn: "created_at", updatedColumn: "updated_at", rows: 1)

    /// A snapshot-shaped database of `dataset` (line 1's columns, or line 2's when `dataset` ends in `.v2`), its outbox
    /// installed.
    static func makeDatabase(_ dir: TemporaryDirectory, _ name: String, dataset: String, seats: Int64 = 0) throws
        -> SQLiteConnection
    {
        let v2 = dataset.hasSuffix(".v2")
        let db = try SQLiteConnection(path: dir.appending(name).path)
        try db.execute(
            "CREATE TABLE trips(id TEXT PRIMARY KEY, name TEXT, seats INTEGER, \(v2 ? "bags" : "luggage") INTEGER, created_at TEXT, updated_at TEXT)"
        )
        try db.run(
            "INSERT INTO trips VALUES (?, 'Växjö-Kalmar', ?, 0, ?, ?)",
            [.text(rowID), .integer(seats), .text(serverTime), .text(serverTime)])
        let table = v2 ? tripsV2 : tripsV1
        try SnapshotMetadata(
            dataset: dataset, version: 1, schemaVersion: v2 ? 2 : 1, createdAt: serverTime, tables: [table]
        ).write(to: db)
        try OutboxSchema.install(on: db, tables: [table])
        return db
    }

    static func lines(_ db: SQLiteConnection) throws -> [SQLiteValue] {
        try db.query("SELECT line FROM ferry_outbox ORDER BY seq").map { $0[0] }
    }

    @Test func aQueueFromBeforeLinesGainsTheColumnItsRowsBeingOfTheirDatabasesLine() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // Given a queue as a client before schema lines made it, with an edit in it
        let db = try SQLiteConnection(path: dir.appending("database.db").path)
        try db.execute(
            """
            CREATE TABLE trips(id TEXT PRIMARY KEY, name TEXT, seats INTEGER, luggage INTEGER, created_at TEXT, updated_at TEXT);
            CREATE TABLE ferry_outbox(seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, tbl TEXT NOT NULL,
              op TEXT NOT NULL CHECK (op IN ('insert', 'update', 'delete')), key TEXT NOT NULL, vals TEXT NOT NULL DEFAULT '{}',
              editedAt TEXT NOT NULL, baseUpdatedAt TEXT, sent INTEGER NOT NULL DEFAULT 0);
            INSERT INTO ferry_outbox(id, tbl, op, key, vals, editedAt) VALUES ('e1', 'trips', 'update', '{"id":"x"}', '{"seats":1}', '2026-11-27T04:00:00.000Z');
            """)
        #expect(try !OutboxSchema.hasLineColumn(db))
        #expect(try OutboxSchema.isCurrent(on: db, tables: [Self.tripsV1], origin: nil) == false)
        // When the client opens it (install runs on every open)
        try OutboxSchema.install(on: db, tables: [Self.tripsV1])
        // Then the column is there, the old edit is of this database's line (NULL), and a second install changes nothing
        #expect(try OutboxSchema.hasLineColumn(db))
        #expect(try Self.lines(db) == [.null])
        #expect(try OutboxSchema.isCurrent(on: db, tables: [Self.tripsV1], origin: nil))
        let batch = try Outbox.takeLineBatch(from: db, limit: 10)
        #expect(batch.line == nil && batch.changes.map(\.id) == ["e1"])
    }

    @Test func aSwapToAnotherLineStampsTheQueueAndDoesNotReplayIt() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // Given edits queued on line 1
        let live = try Self.makeDatabase(dir, "database.db", dataset: "trips.v1")
        try live.run("UPDATE trips SET seats = 5, luggage = 2 WHERE id = ?", [.text(Self.rowID)])
        let inserted = UUID().uuidString.lowercased()
        try live.run("INSERT INTO trips(id, name, seats, luggage) VALUES (?, 'Kalmar-Växjö', 3, 1)", [.text(inserted)])
        #expect(try Self.lines(live) == [.null, .null])

        // When the next version is of line 2 (other columns)
        let fresh = try Self.makeDatabase(dir, "updated.db", dataset: "trips.v2", seats: 9)
        try Outbox.carryOver(
            fromLiveDatabaseAt: dir.appending("database.db").path, into: fresh, tables: [Self.tripsV2])

        // Then the edits stay queued, stamped with line 1, and line 2's tables show the server's data only
        #expect(try Self.lines(fresh) == [.text("trips.v1"), .text("trips.v1")])
        #expect(try fresh.scalar("SELECT seats FROM trips WHERE id = ?", [.text(Self.rowID)]) == 9)
        #expect(try fresh.scalar("SELECT count(*) FROM trips WHERE id = ?", [.text(inserted)]) == 0)
        #expect(try Outbox.count(in: fresh) == 2)

        // And an edit on line 2 is queued on its own, never coalesced into line 1's unsent update of the same row
        try fresh.run("UPDATE trips SET bags = 4 WHERE id = ?", [.text(Self.rowID)])
        #expect(try Self.lines(fresh) == [.text("trips.v1"), .text("trips.v1"), .null])
        let v1Values = try fresh.scalar("SELECT vals FROM ferry_outbox ORDER BY seq LIMIT 1")?.text
        #expect(v1Values?.contains("bags") == false)

        // And a swap back to line 1 (a rollback) makes its edits its own again, replayed; line 2's edit is stamped
        let back = try Self.makeDatabase(dir, "previous.db", dataset: "trips.v1")
        try Outbox.carryOver(fromLiveDatabaseAt: dir.appending("updated.db").path, into: back, tables: [Self.tripsV1])
        #expect(try Self.lines(back) == [.null, .null, .text("trips.v2")])
        #expect(try back.scalar("SELECT seats FROM trips WHERE id = ?", [.text(Self.rowID)]) == 5)
        #expect(try back.scalar("SELECT count(*) FROM trips WHERE id = ?", [.text(inserted)]) == 1)
    }

    @Test func aSwapWithinTheLineReplaysAsBefore() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let live = try Self.makeDatabase(dir, "database.db", dataset: "trips.v2")
        try live.run("UPDATE trips SET bags = 3 WHERE id = ?", [.text(Self.rowID)])
        let fresh = try Self.makeDatabase(dir, "updated.db", dataset: "trips.v2", seats: 9)
        try Outbox.carryOver(
            fromLiveDatabaseAt: dir.appending("database.db").path, into: fresh, tables: [Self.tripsV2])
        #expect(try Self.lines(fresh) == [.null])
        #expect(try fresh.query("SELECT seats, bags FROM trips")[0] == [.integer(9), .integer(3)])
    }

    @Test func batchesHoldOneLinesEditsAndAnswersToAnotherLineLeaveTheTablesAlone() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let live = try Self.makeDatabase(dir, "database.db", dataset: "trips.v1")
        try live.run("UPDATE trips SET seats = 5 WHERE id = ?", [.text(Self.rowID)])
        let fresh = try Self.makeDatabase(dir, "updated.db", dataset: "trips.v2", seats: 9)
        try Outbox.carryOver(
            fromLiveDatabaseAt: dir.appending("database.db").path, into: fresh, tables: [Self.tripsV2])
        try fresh.run("UPDATE trips SET bags = 4 WHERE id = ?", [.text(Self.rowID)])
        #expect(try Outbox.currentLine(of: fresh) == "trips.v2")

        // The oldest line first, in a batch of its own
        let first = try Outbox.takeLineBatch(from: fresh, limit: 10)
        #expect(first.line == "trips.v1" && first.changes.count == 1)
        #expect(first.changes[0].values == ["seats": .int(5)])
        // Its answer (gone: line 1 is retired) goes to ferry_rejected; line 2's row is not touched
        let summary = try Outbox.record(
            [ChangeResult(id: first.changes[0].id, status: .gone, row: nil, message: "schema line 1 is retired")],
            for: first.changes, in: fresh, tables: [Self.tripsV2], line: first.line)
        #expect(summary.gone == 1)
        #expect(try RejectedEdit.all(in: fresh).map(\.id) == [first.changes[0].id])
        #expect(try RejectedEdit.all(in: fresh)[0].outcome == .gone)
        #expect(try fresh.query("SELECT seats, bags FROM trips")[0] == [.integer(9), .integer(4)])

        // Then line 2's own edit
        let second = try Outbox.takeLineBatch(from: fresh, limit: 10)
        #expect(second.line == nil && second.changes.map(\.values) == [["bags": .int(4)]])
        #expect(try Outbox.takeLineBatch(from: fresh, limit: 10, through: 0).changes.isEmpty)
    }

    /// Records what a push sends, per line, and answers every change: `gone` for line 1 (retired), `applied` else.
    struct RecordingUploader: HTTPTransport {
        let sent = Locked<[(String, [String], String)]>([])

        func send<Result: Sendable>(
            _ request: TransportRequest, _ handle: (TransportResponseHead, TransportResponseBody) async throws -> Result
        ) async throws -> Result {
            try await Self.answer(request, handle) { batch, dataset in
                sent.withLock { $0.append((dataset, batch.changes.map(\.id), batch.clientId)) }
                let results = ChangeResults(
                    results: batch.changes.map {
                        ChangeResult(
                            id: $0.id, status: dataset == "trips.v1" ? .gone : .applied, row: nil,
                            message: dataset == "trips.v1" ? "schema line 1 of dataset 'trips' is retired" : nil)
                    })
                return (200, try JSONEncoder().encode(results))
            }
        }

        /// Answers a change upload's `POST …/datasets/{dataset}/changes` with what `answer` makes of its batch.
        static func answer<Result: Sendable>(
            _ request: TransportRequest,
            _ handle: (TransportResponseHead, TransportResponseBody) async throws -> Result,
            _ answer: (ChangeBatch, String) throws -> (Int, Data)
        ) async throws -> Result {
            guard request.method == "POST", case .data(let body)? = request.body else {
                throw FerryError(.offline, "only change uploads are answered here (test)")
            }
            let dataset = request.url.deletingLastPathComponent().lastPathComponent
            let (status, data) = try answer(try JSONDecoder().decode(ChangeBatch.self, from: body), dataset)
            var sent = false
            return try await handle(
                TransportResponseHead(status: status, headers: ["content-type": "application/json"]),
                TransportResponseBody {
                    defer { sent = true }
                    return sent ? nil : data
                })
        }
    }

    @Test func aPushSendsEachLinesEditsToItsLine() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // Given a client directory on line 2 with an edit queued on line 1 before the swap
        let clientDir = ClientDirectory(dir.appending("client"))
        try clientDir.create()
        let live = try Self.makeDatabase(dir, "client/database.db", dataset: "trips.v2")
        try live.run(
            """
            INSERT INTO ferry_outbox(id, tbl, op, key, vals, editedAt, baseUpdatedAt, line)
            VALUES ('6a7d0c53-8f5e-4c59-9d0b-1f2e3d4c5b6a', 'trips', 'update', json_object('id', ?), '{"seats":5}', ?, ?, 'trips.v1')
            """, [.text(Self.rowID), .text(Self.serverTime), .text(Self.serverTime)])
        let uploader = RecordingUploader()
        var config = FerryClient.Configuration(
            directory: clientDir.url, serverURL: URL(string: "http://127.0.0.1:9")!, dataset: "trips")
        config.push.onOpen = false
        let client = try await FerryClient.open(configuration: config.using(uploader), logger: .test)
        defer { Task { await client.close() } }
        _ = try await client.execute("UPDATE trips SET bags = 4 WHERE id = '\(Self.rowID)'")
        #expect(try await client.pendingEdits() == 2)

        // When it pushes
        let result = try await client.push()

        // Then line 1's edit went to line 1 and line 2's (line NULL: database.db's dataset) to line 2, each batch
        // carrying the directory's device id
        let sent = uploader.sent.current
        #expect(sent.map { $0.0 } == ["trips.v1", "trips.v2"])
        #expect(sent[0].1 == ["6a7d0c53-8f5e-4c59-9d0b-1f2e3d4c5b6a"])
        let deviceID = try await client.deviceID()
        #expect(sent.allSatisfy { $0.2 == deviceID })
        #expect(result.summary.gone == 1 && result.summary.applied == 1 && result.remaining == 0)
        #expect(try await client.rejectedEdits().map(\.id) == ["6a7d0c53-8f5e-4c59-9d0b-1f2e3d4c5b6a"])
    }

    /// Answers 410, as the server does, for the lines in `retired`; `applied` for the others.
    struct RetiringUploader: HTTPTransport {
        let retired = Locked<Set<String>>([])
        let sent = Locked<[String]>([])

        func send<Result: Sendable>(
            _ request: TransportRequest, _ handle: (TransportResponseHead, TransportResponseBody) async throws -> Result
        ) async throws -> Result {
            try await RecordingUploader.answer(request, handle) { batch, dataset in
                sent.withLock { $0.append(dataset) }
                if retired.current.contains(dataset) {
                    let body = #"{"error":{"code":"gone","message":"schema line 1 of dataset 'trips' is retired"}}"#
                    return (410, Data(body.utf8))
                }
                let results = ChangeResults(
                    results: batch.changes.map { ChangeResult(id: $0.id, status: .applied, row: nil, message: nil) })
                return (200, try JSONEncoder().encode(results))
            }
        }
    }

    @Test func a410EndsAnOldLinesEditsAsGoneButKeepsTheCurrentLinesQueued() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let clientDir = ClientDirectory(dir.appending("client"))
        try clientDir.create()
        let live = try Self.makeDatabase(dir, "client/database.db", dataset: "trips.v2")
        let foreign = "6a7d0c53-8f5e-4c59-9d0b-1f2e3d4c5b6a"
        try live.run(
            """
            INSERT INTO ferry_outbox(id, tbl, op, key, vals, editedAt, baseUpdatedAt, line)
            VALUES (?, 'trips', 'update', json_object('id', ?), '{"seats":5}', ?, ?, 'trips.v1')
            """, [.text(foreign), .text(Self.rowID), .text(Self.serverTime), .text(Self.serverTime)])
        let uploader = RetiringUploader()
        uploader.retired.withLock { $0 = ["trips.v1", "trips.v2"] }
        var config = FerryClient.Configuration(
            directory: clientDir.url, serverURL: URL(string: "http://127.0.0.1:9")!, dataset: "trips")
        config.push.onOpen = false
        let client = try await FerryClient.open(configuration: config.using(uploader), logger: .test)
        defer { Task { await client.close() } }
        _ = try await client.execute("UPDATE trips SET bags = 4 WHERE id = '\(Self.rowID)'")

        // When both lines are retired: line 1's edit ends as gone, line 2's (database.db's) stays queued and the push
        // says the app needs an update
        let error = await #expect(throws: FerryError.self) { try await client.push() }
        #expect(error?.code == .schemaRetired)
        #expect(uploader.sent.current == ["trips.v1", "trips.v2"])
        let rejected = try await client.rejectedEdits()
        #expect(rejected.map(\.id) == [foreign] && rejected[0].outcome == .gone)
        #expect(rejected[0].reason?.contains("is retired") == true)
        #expect(try await client.pendingEdits() == 1)

        // When line 2 is live again (or the app moved on), its edit goes
        uploader.retired.withLock { $0 = ["trips.v1"] }
        let pushed = try await client.push()
        #expect(pushed.summary.applied == 1 && pushed.remaining == 0)
    }

    @Test func a410OnAnUploadIsSchemaRetired() {
        let error = #expect(throws: FerryError.self) {
            try ChangeUploadResponse.results(
                status: 410, data: Data(#"{"error":{"code":"gone","message":"lines served: 2"}}"#.utf8), url: "u")
        }
        #expect(error?.code == .schemaRetired && error?.message.contains("lines served: 2") == true)
    }
}
