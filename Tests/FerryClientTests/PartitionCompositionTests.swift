import FerryCore
import Foundation
import Logging
import Testing

@testable import FerryClient

/// Stream files of a partitioned dataset made by hand, the way the publisher writes them (every stream file has every
/// table; the tables not in the stream are empty): projects placed by their own key, sites by `project_id`, findings
/// by their parent site, checklist_items shared.
struct PartitionStreamFixture {
    static let layout = PartitionLayout(
        partition: .init(table: "projects", key: "id"),
        tables: [
            .init(name: "projects", partition: "id"), .init(name: "sites", partition: "project_id"),
            .init(name: "findings", parent: .init(table: "sites", column: "site_id")),
            .init(name: "checklist_items"),
        ])
    static let tables = [
        SnapshotMetadata.TableInfo(
            name: "checklist_items", primaryKey: ["id"], columns: ["id", "label"], writable: false, merge: .newestWins,
            createdColumn: nil, updatedColumn: nil, rows: 0),
        SnapshotMetadata.TableInfo(
            name: "findings", primaryKey: ["id"], columns: ["id", "site_id", "note"], writable: true,
            merge: .newestWins, createdColumn: nil, updatedColumn: nil, rows: 0),
        SnapshotMetadata.TableInfo(
            name: "projects", primaryKey: ["id"], columns: ["id", "name"], writable: true, merge: .newestWins,
            createdColumn: nil, updatedColumn: nil, rows: 0),
        SnapshotMetadata.TableInfo(
            name: "sites", primaryKey: ["id"], columns: ["id", "project_id", "name"], writable: true,
            merge: .newestWins, createdColumn: nil, updatedColumn: nil, rows: 0),
    ]

    /// Writes a stream file at `file`: the shared stream (`project == nil`: checklist items) or project `project`'s
    /// (its project row, `sites` sites with ids `project * 100 + n`, one finding per site).
    @discardableResult
    static func write(_ file: URL, project: Int?, sites: Int = 2, version: Int = 1) throws -> URL {
        try FileManager.default.createDirectory(
            at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        let db = try SQLiteConnection(path: file.path)
        var counts = ["checklist_items": 0, "findings": 0, "projects": 0, "sites": 0]
        try db.transaction {
            try db.execute(
                """
                CREATE TABLE checklist_items(id INTEGER PRIMARY KEY, label TEXT NOT NULL);
                CREATE TABLE projects(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
                CREATE TABLE sites(id TEXT PRIMARY KEY, project_id INTEGER NOT NULL, name TEXT NOT NULL);
                CREATE TABLE findings(id TEXT PRIMARY KEY, site_id TEXT NOT NULL, note TEXT);
                """)
            if let project {
                _ = try db.run("INSERT INTO projects VALUES (?, ?)", [.integer(Int64(project)), .text("P\(project)")])
                for n in 0..<sites {
                    let site = id(project * 100 + n)
                    _ = try db.run(
                        "INSERT INTO sites VALUES (?, ?, ?)",
                        [.text(site), .integer(Int64(project)), .text("S\(site)")])
                    _ = try db.run(
                        "INSERT INTO findings VALUES (?, ?, 'ok')",
                        [.text(id(project * 100 + n, finding: true)), .text(site)])
                }
                counts["projects"] = 1
                counts["sites"] = sites
                counts["findings"] = sites
            } else {
                try db.execute("INSERT INTO checklist_items VALUES (1, 'Fire exits'), (2, 'Railings')")
                counts["checklist_items"] = 2
            }
            var tables = Self.tables
            for i in tables.indices { tables[i].rows = counts[tables[i].name] ?? 0 }
            try SnapshotMetadata(
                dataset: "projects", version: version, schemaVersion: 1, createdAt: "2026-11-29T07:00:00.000Z",
                tables: tables
            ).write(to: db)
        }
        return file
    }

    /// The UUID text key of site (or finding) `n`: device inserts need UUID keys.
    static func id(_ n: Int, finding: Bool = false) -> String {
        String(format: "00000000-0000-4000-%@-%012d", finding ? "9000" : "8000", n)
    }

    static func count(_ file: URL, _ sql: String) throws -> Int64 {
        try SQLiteConnection(path: file.path, mode: .readOnly).scalar(sql)?.integer ?? -1
    }
}

@Suite struct PartitionCompositionTests {
    typealias Fixture = PartitionStreamFixture

    @Test func composesTheSharedTablesAndEverySubscribedPartition() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let shared = try Fixture.write(dir.appending("shared.db"), project: nil, version: 7)
        let one = try Fixture.write(dir.appending("p1.db"), project: 1, sites: 2)
        let two = try Fixture.write(dir.appending("p2.db"), project: 2, sites: 3)
        let target = dir.appending("composed.db")

        let outcome = try PartitionComposer(
            shared: shared, partitions: [one, two], leaving: [:], live: nil, keys: ["1", "2"], layout: Fixture.layout
        ).compose(into: target)

        #expect(outcome.rows == 2 + 2 + 5 + 5)
        #expect(try Fixture.count(target, "SELECT count(*) FROM sites") == 5)
        #expect(try Fixture.count(target, "SELECT count(*) FROM findings") == 5)
        #expect(try Fixture.count(target, "SELECT count(*) FROM projects") == 2)
        let db = try SQLiteConnection(path: target.path, mode: .readOnly)
        let metadata = try SnapshotMetadata.read(from: db)
        #expect(metadata.version == 7)
        #expect(metadata.tables.first { $0.name == "sites" }?.rows == 5)
        #expect(try db.scalar("SELECT tables FROM ferry_snapshot")?.text?.contains("\"sites\":5") == true)
        #expect(try db.query("SELECT key FROM ferry_partitions ORDER BY key").map { $0[0].text } == ["1", "2"])
        try db.checkIntegrity()
    }

    @Test func keepsTheRowsOfALeavingPartitionThatAQueuedEditNames() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let shared = try Fixture.write(dir.appending("shared.db"), project: nil)
        let one = try Fixture.write(dir.appending("p1.db"), project: 1)
        let three = try Fixture.write(dir.appending("p3.db"), project: 3, sites: 4)
        // The live database: projects 1 and 3, with an edit of site 302 queued.
        let live = dir.appending("live.db")
        _ = try PartitionComposer(
            shared: shared, partitions: [one, three], leaving: [:], live: nil, keys: ["1", "3"],
            layout: Fixture.layout
        ).compose(into: live)
        let liveDB = try SQLiteConnection(path: live.path)
        try OutboxSchema.install(on: liveDB, tables: Fixture.tables)
        _ = try liveDB.run("UPDATE sites SET name = 'renamed' WHERE id = ?", [.text(Fixture.id(302))])

        let composed = dir.appending("composed.db")
        let outcome = try PartitionComposer(
            shared: shared, partitions: [one], leaving: ["3": three], live: live, keys: ["1"], layout: Fixture.layout
        ).compose(into: composed)

        #expect(outcome.held == ["3": 1])
        #expect(try Fixture.count(composed, "SELECT count(*) FROM sites WHERE project_id = 3") == 1)
        #expect(try Fixture.count(composed, "SELECT count(*) FROM sites WHERE name = 'renamed'") == 0)  // as published
        #expect(try Fixture.count(composed, "SELECT count(*) FROM sites WHERE project_id = 1") == 2)

        // Once the edit is answered (the queue is empty), nothing of project 3 stays.
        try liveDB.execute("DELETE FROM ferry_outbox")
        let later = try PartitionComposer(
            shared: shared, partitions: [one], leaving: ["3": three], live: live, keys: ["1"], layout: Fixture.layout
        ).compose(into: composed)
        #expect(later.held == ["3": 0])
        #expect(try Fixture.count(composed, "SELECT count(*) FROM sites WHERE project_id = 3") == 0)
    }

    @Test func refusesAStreamFileWithAnotherSchema() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let shared = try Fixture.write(dir.appending("shared.db"), project: nil)
        let odd = try Fixture.write(dir.appending("p1.db"), project: 1)
        try SQLiteConnection(path: odd.path).execute("ALTER TABLE sites ADD COLUMN extra TEXT")
        let target = dir.appending("composed.db")

        let error = ferryError {
            _ = try PartitionComposer(
                shared: shared, partitions: [odd], leaving: [:], live: nil, keys: ["1"], layout: Fixture.layout
            ).compose(into: target)
        }

        #expect(error?.code == .verification)
        #expect(error?.message.contains("'sites'") == true)
        #expect(!FileManager.default.fileExists(atPath: target.path))
    }

    @Test func aDeviceInsertMustNameASubscribedPartition() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let shared = try Fixture.write(dir.appending("shared.db"), project: nil)
        let one = try Fixture.write(dir.appending("p1.db"), project: 1)
        let target = dir.appending("composed.db")
        _ = try PartitionComposer(
            shared: shared, partitions: [one], leaving: [:], live: nil, keys: ["1"], layout: Fixture.layout
        ).compose(into: target)
        let db = try SQLiteConnection(path: target.path)
        try OutboxSchema.install(on: db, tables: Fixture.tables)

        let site = ferryError {
            _ = try db.run("INSERT INTO sites VALUES (?, 9, 'elsewhere')", [.text(Fixture.id(900))])
        }
        #expect(site?.message.contains("sites.project_id") == true)
        #expect(site?.message.contains("subscribe") == true)
        let moved = ferryError {
            _ = try db.run("UPDATE sites SET project_id = 9 WHERE id = ?", [.text(Fixture.id(100))])
        }
        #expect(moved?.message.contains("sites.project_id") == true)
        let finding = ferryError {
            _ = try db.run(
                "INSERT INTO findings VALUES (?, ?, 'orphan')",
                [.text(Fixture.id(900, finding: true)), .text(Fixture.id(900))])
        }
        #expect(finding?.message.contains("findings.site_id") == true)
        #expect(try Outbox.count(in: db) == 0)

        _ = try db.run("INSERT INTO sites VALUES (?, 1, 'new')", [.text(Fixture.id(150))])
        _ = try db.run(
            "INSERT INTO findings VALUES (?, ?, 'new')",
            [.text(Fixture.id(150, finding: true)), .text(Fixture.id(150))])
        #expect(try Outbox.count(in: db) == 2)
        // Writes with capture off (a replay, the server's answers) are never refused.
        try Outbox.setCapture(false, db)
        _ = try db.run("INSERT INTO sites VALUES (?, 9, 'replayed')", [.text(Fixture.id(901))])
    }

    @Test func subscriptionsSurviveAReloadAndRefuseAnUnknownKey() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = dir.appending("subscriptions.json")
        var subscriptions = Subscriptions(dataset: "projects", layout: Fixture.layout)
        subscriptions.subscribe(["7", "1", "7"])
        try subscriptions.unsubscribe(["7"])
        try subscriptions.save(to: file)

        let loaded = try Subscriptions.load(from: file)
        #expect(loaded == subscriptions)
        #expect(loaded?.keys == ["1"])
        #expect(loaded?.leaving == ["7"])
        let error = ferryError { try subscriptions.unsubscribe(["99"]) }
        #expect(error?.code == .notFound)
        #expect(error?.message.contains("'99'") == true)
        subscriptions.subscribe(["7"])
        #expect(subscriptions.leaving.isEmpty)
        try Data("{".utf8).write(to: file)
        #expect(ferryError { _ = try Subscriptions.load(from: file) }?.path == file.path)
    }

    @Test func streamNamesAndURLsCarryAnyKey() throws {
        for key in ["1", "a/b c", "Växjö", "%41"] {
            let stream = PartitionStream.partition(key)
            #expect(PartitionStream(directoryName: stream.directoryName) == stream)
            #expect(!stream.directoryName.contains("/"))
        }
        let base = URL(string: "http://127.0.0.1:8080/v1/datasets/projects")!
        #expect(
            PartitionStream.url(base, appending: PartitionStream.partition("a/b c").pathSegments).absoluteString
                == "http://127.0.0.1:8080/v1/datasets/projects/partitions/a%2Fb%20c")
        #expect(PartitionStream(directoryName: "shared") == .shared)
        #expect(PartitionStream(directoryName: "p-zz") == nil)
        #expect(ferryError { try PartitionStream.validate(key: "") }?.code == .badInput)
        #expect(ferryError { try PartitionStream.validate(key: "a\nb") }?.code == .badInput)
        #expect(ferryError { try PartitionStream.validate(key: String(repeating: "x", count: 201)) } != nil)
    }
}

/// The composition installed through the client's own install path (initial sync, then `updated.db` and the swap with
/// the outbox replayed), from stream directories made by hand: no server needed.
@Suite struct PartitionInstallTests {
    typealias Fixture = PartitionStreamFixture

    @Test func aCompositionIsInstalledAndReplacedLikeADownload() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let directory = ClientDirectory(dir.url)
        try Fixture.write(directory.directory(of: .shared).database, project: nil)
        try Fixture.write(directory.directory(of: .partition("1")).database, project: 1)
        try Fixture.write(directory.directory(of: .partition("2")).database, project: 2, sites: 3)
        var subscriptions = Subscriptions(dataset: "projects", layout: Fixture.layout)
        subscriptions.subscribe(["1", "2"])
        try subscriptions.save(to: directory.subscriptionsFile)
        let configuration = FerryClient.Configuration(
            directory: dir.url, serverURL: URL(string: "http://127.0.0.1:9")!, dataset: "projects")
        let client = try await FerryClient.open(configuration: configuration, logger: Logger(label: "test"))

        let first = try await client.composeAndInstall(received: 0)
        #expect(first.outcome == .initialSync)
        #expect(await client.subscriptions == ["1", "2"])
        #expect(try Fixture.count(directory.database, "SELECT count(*) FROM sites") == 5)
        #expect(try await client.composeAndInstall(received: 0).outcome == .notModified)
        let partitions = try await client.status().partitions
        #expect(partitions == [.init(key: "1", version: 1, rows: 5), .init(key: "2", version: 1, rows: 7)])

        // Given an edit queued on a site of project 2, when the device leaves project 2 ...
        _ = try await client.withDatabase { db in
            try db.run("UPDATE sites SET name = 'edited' WHERE id = ?", [.text(Fixture.id(201))])
        }
        try await client.unsubscribe(["2"])
        let second = try await client.composeAndInstall(received: 0)
        #expect(second.outcome == .updateDownloaded)
        try await client.applyPendingUpdate()

        // ... then only the edited row stays, with the edit on top, until the edit is answered.
        #expect(try Fixture.count(directory.database, "SELECT count(*) FROM sites WHERE project_id = 2") == 1)
        #expect(try Fixture.count(directory.database, "SELECT count(*) FROM sites WHERE name = 'edited'") == 1)
        #expect(try Fixture.count(directory.database, "SELECT count(*) FROM projects") == 1)
        #expect(try Fixture.count(directory.database, "SELECT count(*) FROM sites WHERE project_id = 1") == 2)
        #expect(try Subscriptions.load(from: directory.subscriptionsFile)?.leaving == ["2"])
        #expect(try await client.status().partitions?.map(\.key) == ["1"])

        // A new insert must name a subscribed project; one that does is queued.
        await #expect(throws: FerryError.self) {
            _ = try await client.withDatabase { db in
                try db.run("INSERT INTO sites VALUES (?, 2, 'no')", [.text(Fixture.id(250))])
            }
        }
        _ = try await client.withDatabase { db in
            try db.run("INSERT INTO sites VALUES (?, 1, 'yes')", [.text(Fixture.id(150))])
        }
        #expect(try await client.status().outbox == 2)
        await client.close()
    }
}
