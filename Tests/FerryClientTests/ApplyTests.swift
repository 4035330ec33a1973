import FerryCore
import Foundation
import Testing

@testable import FerryClient

/// Apply, rollback, launch and their crash safety, on real directories with real published snapshot files.
/// The files are planted as a verified fetch leaves them (a published file renamed into place), so these tests need
/// no server; the fetch side is covered against the real server in ClientServerTests.
@Suite struct ApplyTests {
    struct Setup {
        let temp: TemporaryDirectory
        let fixtures: SnapshotFixtures
        var published: [Manifest] = []
        let dir: ClientDirectory

        init(versions: Int = 2) throws {
            temp = try TemporaryDirectory("ferry-apply")
            fixtures = SnapshotFixtures(root: temp.appending("store"))
            for i in 1...versions { published.append(try fixtures.publish(rows: 3 + i)) }
            dir = ClientDirectory(temp.appending("client"))
            try dir.create()
        }

        /// Copies published `version` to `file` (fsynced), as a verified download would have left it.
        func plant(_ version: Int, at file: URL) throws {
            try? FileManager.default.removeItem(at: file)
            try FileManager.default.copyItem(at: fixtures.snapshotFile(version), to: file)
        }

        func open(applyOnLaunch: Bool = true, prepare: FerryClient.PrepareUpdate? = nil) async throws -> FerryClient {
            var configuration = FerryClient.Configuration(directory: dir.url)
            configuration.update.applyOnOpen = applyOnLaunch
            configuration.update.prepare = prepare
            return try await FerryClient.open(configuration: configuration, logger: .test)
        }

        func liveVersion() throws -> Int? { try publishedVersion(of: dir.database, among: published) }
    }

    @Test func applyKeepsPreviousAndRollbackRestoresIt() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        try setup.plant(1, at: setup.dir.database)
        try setup.plant(2, at: setup.dir.updated)
        let client = try await setup.open(applyOnLaunch: false)
        defer { Task { await client.close() } }

        // Given version 1 live and version 2 pending
        var status = try await client.status()
        #expect(status.state == .updatePending)
        #expect(status.version == 1 && status.pendingVersion == 2)
        #expect(status.sha256 == setup.published[0].sha256 && status.pendingSha256 == setup.published[1].sha256)
        #expect(try await client.withDatabase { try $0.scalar("SELECT version FROM ferry_snapshot")?.integer } == 1)

        // When it is applied
        let applied = try await client.applyPendingUpdate()

        // Then version 2 is live, version 1 is previous.db, nothing is pending, and connections see version 2
        #expect(applied.applied && applied.version == 2 && applied.previousVersion == 1)
        status = try await client.status()
        #expect(
            status == ClientStatus(state: .upToDate, version: 2, sha256: setup.published[1].sha256, previousVersion: 1))
        #expect(try await client.withDatabase { try $0.scalar("SELECT version FROM ferry_snapshot")?.integer } == 2)
        #expect(try publishedVersion(of: setup.dir.previous, among: setup.published) == 1)

        // When it is rolled back
        let rolledBack = try await client.rollback()
        #expect(rolledBack.version == 1 && rolledBack.rolledBackVersion == 2)
        #expect(try setup.liveVersion() == 1)
        #expect(try await client.withDatabase { try $0.scalar("SELECT version FROM ferry_snapshot")?.integer } == 1)
        #expect(!setup.dir.exists(setup.dir.previous))
        // And the rolled-back version is remembered so the next check sends it in If-None-Match
        let state = ClientStateFile.load(from: setup.dir.stateFile) { Issue.record("state.json: \($0)") }
        #expect(state.refusedChecksums(accepts: { _ in true }) == [setup.published[1].sha256])

        // A second rollback has nothing to go back to
        let error = await #expect(throws: FerryError.self) { try await client.rollback() }
        #expect(error?.code == .noPreviousVersion)
    }

    /// A writer killed before its journal's first sync leaves a journal whose header is still zero: SQLite does not
    /// roll it back (database.db was not touched yet) and leaves the file. The swap removes it, holding the write
    /// lock, instead of reporting a writer forever.
    @Test func aJournalOfAWriterKilledBeforeItsFirstSyncDoesNotBlockTheSwap() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        try setup.plant(1, at: setup.dir.database)
        try setup.plant(2, at: setup.dir.updated)
        // (a first open installs the outbox: a write, which would replace any journal)
        await (try setup.open(applyOnLaunch: false)).close()
        let journal = URL(fileURLWithPath: setup.dir.database.path + "-journal")
        try (Data(count: 28) + Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 * 31 + 1) })).write(to: journal)
        let client = try await setup.open(applyOnLaunch: false)
        defer { Task { await client.close() } }

        let applied = try await client.applyPendingUpdate()

        #expect(applied.applied && applied.version == 2)
        #expect(!FileManager.default.fileExists(atPath: journal.path))
        #expect(try setup.liveVersion() == 2)
        #expect(try publishedVersion(of: setup.dir.previous, among: setup.published) == 1)
    }

    /// A writer that holds database.db's write lock keeps its journal: the swap waits for it (busy), whatever the
    /// journal's header says.
    @Test func aWriterHoldingTheLockKeepsItsJournalAndTheSwapIsBusy() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        try setup.plant(1, at: setup.dir.database)
        try setup.plant(2, at: setup.dir.updated)
        let client = try await setup.open(applyOnLaunch: false)
        defer { Task { await client.close() } }
        let writer = try SQLiteConnection(path: setup.dir.database.path, mode: .readWrite)
        // Inside its transaction, before any sync: its journal's header is still zero, as a killed writer's is
        try writer.execute("BEGIN IMMEDIATE; CREATE TABLE filler(b BLOB)")
        let journal = setup.dir.database.path + "-journal"
        #expect(try FileHandle(forReadingFrom: URL(fileURLWithPath: journal)).read(upToCount: 1)?.first == 0)

        let error = await #expect(throws: FerryError.self) { try await client.applyPendingUpdate() }

        #expect(error?.code == .busy)
        #expect(FileManager.default.fileExists(atPath: journal))
        try writer.execute("ROLLBACK")
        #expect(try setup.liveVersion() == 1)
    }

    /// An apply always names the version it made live: a pending file that names none is refused before anything
    /// moves.
    @Test func aPendingFileWithoutASnapshotVersionIsRefusedBeforeTheSwap() async throws {
        let setup = try Setup(versions: 1)
        defer { setup.temp.remove() }
        try setup.plant(1, at: setup.dir.database)
        // A SQLite file with a table but no ferry_snapshot row
        try SQLiteConnection(path: setup.dir.updated.path, mode: .readWriteCreate).execute("CREATE TABLE t (x INTEGER)")
        let client = try await setup.open(applyOnLaunch: false)
        defer { Task { await client.close() } }

        let error = await #expect(throws: FerryError.self) { try await client.applyPendingUpdate() }
        #expect(error?.code == .verification && error?.path == setup.dir.updated.path)
        #expect(try setup.liveVersion() == 1)
        #expect(!setup.dir.exists(setup.dir.previous))
    }

    @Test func applyWithNothingPendingIsANoOpThatSaysSo() async throws {
        let setup = try Setup(versions: 1)
        defer { setup.temp.remove() }
        try setup.plant(1, at: setup.dir.database)
        let client = try await setup.open()
        let result = try await client.applyPendingUpdate()
        await client.close()
        #expect(!result.applied)
        #expect(result == .nothingPending(status: result.status))
        #expect(try setup.liveVersion() == 1)
        #expect(!setup.dir.exists(setup.dir.previous))
    }

    @Test func twoConcurrentAppliesApplyOnce() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        try setup.plant(1, at: setup.dir.database)
        try setup.plant(2, at: setup.dir.updated)
        let client = try await setup.open(applyOnLaunch: false)
        async let first = client.applyPendingUpdate()
        async let second = client.applyPendingUpdate()
        let results = try await [first, second]
        await client.close()
        #expect(results.filter(\.applied).count == 1)
        #expect(results.filter { !$0.applied }.count == 1)
        // previous.db is version 1, not version 2: the second call did not apply again.
        #expect(try setup.liveVersion() == 2)
        #expect(try publishedVersion(of: setup.dir.previous, among: setup.published) == 1)
    }

    @Test func openAppliesThePendingUpdateBeforeHandingOutConnections() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        try setup.plant(1, at: setup.dir.database)
        try setup.plant(2, at: setup.dir.updated)
        let client = try await setup.open()
        let seen = try await client.withDatabase { try $0.scalar("SELECT version FROM ferry_snapshot")?.integer }
        let status = try await client.status()
        await client.close()
        #expect(seen == 2)
        #expect(status.state == .upToDate && status.version == 2 && status.previousVersion == 1)
    }

    @Test func noDatabaseBeforeTheInitialSync() async throws {
        let setup = try Setup(versions: 1)
        defer { setup.temp.remove() }
        let client = try await setup.open()
        #expect(try await client.status() == ClientStatus(state: .initialSyncRequired))
        let error = await #expect(throws: FerryError.self) { try await client.withDatabase { _ in 1 } }
        await client.close()
        #expect(error?.code == .noDatabase)
    }

    @Test func secondClientOnTheSameDirectoryIsBusy() async throws {
        let setup = try Setup(versions: 1)
        defer { setup.temp.remove() }
        let client = try await setup.open()
        let error = await #expect(throws: FerryError.self) { _ = try await setup.open() }
        await client.close()
        #expect(error?.code == .busy)
        // Released by close(): a new client opens.
        let again = try await setup.open()
        await again.close()
    }

    /// The outbox's hook runs on the pending file inside the swap and sees the live database.
    @Test func prepareHookRunsOnTheUpdateBeforeItGoesLive() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        try setup.plant(1, at: setup.dir.database)
        try setup.plant(2, at: setup.dir.updated)
        let client = try await setup.open(applyOnLaunch: false) { updated, live in
            let liveVersion = try live?.scalar("SELECT version FROM ferry_snapshot")?.integer ?? 0
            try updated.run(
                "INSERT OR REPLACE INTO trips(id, name, seats) VALUES ('local', 'kept from v' || ?, 1)",
                [.integer(liveVersion)])
        }
        try await client.applyPendingUpdate()
        let name = try await client.withDatabase { try $0.scalar("SELECT name FROM trips WHERE id = 'local'")?.text }
        let status = try await client.status()
        await client.close()
        #expect(name == "kept from v1")
        // The cached checksum stays the published one (it is what If-None-Match must carry).
        #expect(status.sha256 == setup.published[1].sha256)
    }

    /// A crash after every prefix of the apply plan: database.db is always one complete published version, and the
    /// next launch finishes the job.
    @Test(arguments: 0...3)
    func crashDuringApplyAtEveryStep(completedSteps: Int) async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        try setup.plant(1, at: setup.dir.database)
        try setup.plant(2, at: setup.dir.updated)
        try setup.plant(1, at: setup.dir.previous)

        // Given a "crash" after `completedSteps` steps of the swap (the process did nothing else)
        for step in ClientDirectory.applyPlan(hasDatabase: true).prefix(completedSteps) { try setup.dir.perform(step) }

        // Then database.db is a complete published version: the old one until the final rename, then the new one
        #expect(try setup.liveVersion() == (completedSteps == 3 ? 2 : 1))
        // And the next launch completes the apply
        let client = try await setup.open()
        let status = try await client.status()
        await client.close()
        #expect(status.state == .upToDate)
        #expect(status.version == 2)
        #expect(try setup.liveVersion() == 2)
        #expect(try publishedVersion(of: setup.dir.previous, among: setup.published) == 1)
        #expect(!setup.dir.exists(setup.dir.previousLink))
    }

    @Test func statusCacheIsRefreshedWhenAFileChanges() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        try setup.plant(1, at: setup.dir.database)
        #expect(try await FerryClient.status(directory: setup.dir.url).version == 1)
        // Replaced behind the library's back (another inode): the cache misses and the file is rehashed.
        try setup.plant(2, at: setup.dir.database)
        let status = try await FerryClient.status(directory: setup.dir.url)
        #expect(status.version == 2 && status.sha256 == setup.published[1].sha256)
    }
}
