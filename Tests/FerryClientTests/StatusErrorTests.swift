import FerryCore
import Foundation
import Testing

@testable import FerryClient

/// A status never shows a number it did not read: what cannot be read is an error that says so.
@Suite struct StatusErrorTests {
    /// database.db whose `ferry_outbox` table cannot be read (the page type byte of the root page of its b-tree and of
    /// its indexes' is garbage, so every read of it is "database disk image is malformed"), while the rest of the file
    /// reads fine.
    static func directoryWithUnreadableOutbox(_ temp: TemporaryDirectory) throws -> ClientDirectory {
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        try fixtures.publish()
        let dir = ClientDirectory(temp.appending("client"))
        try dir.create()
        try FileManager.default.copyItem(at: fixtures.snapshotFile(1), to: dir.database)
        let (rootPages, pageSize): ([Int64], Int64)
        do {
            let db = try SQLiteConnection(path: dir.database.path, mode: .readWrite)
            try OutboxSchema.install(on: db, tables: try SnapshotMetadata.read(from: db).tables)
            try db.execute(
                "INSERT INTO ferry_outbox(id, tbl, op, key, editedAt) VALUES ('e1', 'trips', 'update', '{}', '2024-01-01T00:00:00.000Z')"
            )
            rootPages = try db.query(
                "SELECT rootpage FROM sqlite_master WHERE tbl_name = 'ferry_outbox' AND rootpage > 1"
            ).compactMap { $0[0].integer }
            pageSize = try db.scalar("PRAGMA page_size")?.integer ?? 0
        }
        #expect(rootPages.count >= 2 && pageSize > 0)
        let handle = try FileHandle(forWritingTo: dir.database)
        for page in rootPages {
            try handle.seek(toOffset: UInt64((page - 1) * pageSize))
            try handle.write(contentsOf: Data([0x42]))
        }
        try handle.close()
        return dir
    }

    @Test func unreadableOutboxFailsTheStatus() async throws {
        let temp = try TemporaryDirectory("ferry-status")
        defer { temp.remove() }
        let dir = try Self.directoryWithUnreadableOutbox(temp)

        // The library throws instead of reporting 0 queued edits
        let error = await #expect(throws: FerryError.self) { try await FerryClient.status(directory: dir.url) }
        #expect(
            error?.message.contains("cannot count the local edits waiting in database.db's outbox") == true,
            "\(String(describing: error))")
        #expect(error?.path == dir.database.path)

        // And `ferry status` fails with that reason on one line, printing no status at all
        for arguments in [["status", "--dir", dir.url.path], ["status", "--dir", dir.url.path, "--json"]] {
            let result = try await runFerry(arguments)
            #expect(result.status == 1)
            #expect(result.stdout.isEmpty, "\(result.stdout)")
            #expect(!result.stdout.contains("outbox"))
            #expect(result.stderr.contains("cannot count the local edits"), "\(result.stderr)")
            #expect(
                result.stderr.trimmingCharacters(in: .newlines).split(separator: "\n").count == 1, "\(result.stderr)")
        }
    }

    @Test func malformedStateFileIsReportedAndRebuilt() async throws {
        // Given a directory with a live database and a state.json that is not JSON
        let temp = try TemporaryDirectory("ferry-status")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        let v1 = try fixtures.publish()
        let dir = ClientDirectory(temp.appending("client"))
        try dir.create()
        try FileManager.default.copyItem(at: fixtures.snapshotFile(1), to: dir.database)
        try Data("{not json".utf8).write(to: dir.stateFile)

        // When `ferry status` reads it, the status is right and the lost cache is reported on stderr
        let result = try await runFerry(["status", "--dir", dir.url.path, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains(#""sha256":"\#(v1.sha256)""#))
        #expect(result.stderr.contains("state.json is malformed"), "\(result.stderr)")

        // And the cache is written again, well-formed
        let rebuilt = ClientStateFile.load(from: dir.stateFile) { Issue.record("state.json: \($0)") }
        #expect(rebuilt.checksums.map(\.info.sha256) == [v1.sha256])
    }

    /// database.db as a writer killed inside a transaction leaves it: the transaction's pages already written over
    /// the file (a cache spill) and a hot rollback journal beside it, no lock held. Built by copying both files while
    /// the writer is still inside its transaction.
    static func directoryWithHotJournal(_ temp: TemporaryDirectory) throws -> (ClientDirectory, SnapshotFixtures) {
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        try fixtures.publish()
        let work = temp.appending("work.db")
        try FileManager.default.copyItem(at: fixtures.snapshotFile(1), to: work)
        let writer = try SQLiteConnection(path: work.path, mode: .readWrite)
        try OutboxSchema.install(on: writer, tables: try SnapshotMetadata.read(from: writer).tables)
        try writer.execute(
            "INSERT INTO ferry_outbox(id, tbl, op, key, editedAt) VALUES ('e1', 'trips', 'update', '{}', '2024-01-01T00:00:00.000Z')"
        )
        try writer.execute("PRAGMA cache_size = 2; BEGIN")
        try writer.execute("CREATE TABLE filler(b BLOB)")
        for _ in 0..<64 { try writer.run("INSERT INTO filler VALUES (?)", [.blob([UInt8](repeating: 7, count: 8192))]) }
        try writer.execute("DELETE FROM ferry_outbox")
        let dir = ClientDirectory(temp.appending("client"))
        try dir.create()
        try FileManager.default.copyItem(at: work, to: dir.database)
        try FileManager.default.copyItem(atPath: work.path + "-journal", toPath: dir.database.path + "-journal")
        try writer.execute("ROLLBACK")
        return (dir, fixtures)
    }

    @Test func hotJournalOfAKilledWriterIsRolledBackByStatus() async throws {
        let temp = try TemporaryDirectory("ferry-status")
        defer { temp.remove() }
        let (dir, _) = try Self.directoryWithHotJournal(temp)
        let journal = dir.database.path + "-journal"
        #expect(FileManager.default.fileExists(atPath: journal))

        // `ferry status` reads the last committed state: version 1 and the one committed edit, not the killed
        // transaction's deletion of it
        let result = try await runFerry(["status", "--dir", dir.url.path, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains(#""outbox":1"#), "\(result.stdout)")
        #expect(result.stdout.contains(#""version":1"#), "\(result.stdout)")

        // And the journal was rolled back, leaving a database with no trace of the killed transaction
        #expect(!FileManager.default.fileExists(atPath: journal))
        let db = try SQLiteConnection(path: dir.database.path, mode: .readOnly)
        #expect(try db.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'filler'")?.integer == 0)
        #expect(try db.scalar("PRAGMA integrity_check")?.text == "ok")
    }
}
