import FerryCore
import Foundation
import Testing

@testable import FerryClient

/// Blocking file and SQLite work leaves Swift's cooperative threads: it runs on a Dispatch queue (BlockingWork), where
/// no Swift task
/// is current. (On a cooperative thread, synchronous code called from a task sees that task.)
@Suite struct BlockingWorkTests {
    static func runsOutsideAnyTask() -> Bool { withUnsafeCurrentTask { $0 == nil } }

    @Test func databaseWorkAndTheSwapRunOnTheThreadPool() async throws {
        // Given version 1 live and version 2 pending, and a prepare hook that notes where it runs
        let temp = try TemporaryDirectory("ferry-blocking")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        try fixtures.publish()
        try fixtures.publish()
        let dir = ClientDirectory(temp.appending("client"))
        try dir.create()
        try FileManager.default.copyItem(at: fixtures.snapshotFile(1), to: dir.database)
        try FileManager.default.copyItem(at: fixtures.snapshotFile(2), to: dir.updated)
        let hookOutsideTask = Locked<Bool?>(nil)
        var configuration = FerryClient.Configuration(directory: dir.url)
        configuration.push.onOpen = false
        configuration.update.prepare = { _, _ in hookOutsideTask.withLock { $0 = Self.runsOutsideAnyTask() } }

        // When the client opens (applying the update) and runs a query
        let client = try await FerryClient.open(configuration: configuration, logger: .test)
        let queryOutsideTask = try await client.withDatabase { _ in Self.runsOutsideAnyTask() }
        let version = try await client.status().version
        await client.close()

        // Then the swap's SQLite work and the query ran on the thread pool, and the update was applied
        #expect(hookOutsideTask.current == true)
        #expect(queryOutsideTask)
        #expect(version == 2)
        // And the test itself runs in a task, so the check can tell the two apart
        #expect(!Self.runsOutsideAnyTask())
    }

    @Test func concurrentAppliesStillApplyOnce() async throws {
        // Given version 1 live and version 2 pending, opened without applying
        let temp = try TemporaryDirectory("ferry-blocking")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        try fixtures.publish()
        try fixtures.publish()
        let dir = ClientDirectory(temp.appending("client"))
        try dir.create()
        try FileManager.default.copyItem(at: fixtures.snapshotFile(1), to: dir.database)
        try FileManager.default.copyItem(at: fixtures.snapshotFile(2), to: dir.updated)
        var configuration = FerryClient.Configuration(directory: dir.url)
        configuration.push.onOpen = false
        configuration.update.applyOnOpen = false
        let client = try await FerryClient.open(configuration: configuration, logger: .test)

        // When queries, statuses and two applies run at once (each apply awaits the thread pool midway)
        async let query = client.withDatabase { try $0.scalar("SELECT version FROM ferry_snapshot")?.integer }
        async let first = client.applyPendingUpdate()
        async let status = client.status()
        async let second = client.applyPendingUpdate()
        let results = try await [first.applied, second.applied]
        let queried = try await query
        _ = try await status
        let after = try await client.status()
        await client.close()

        // Then exactly one applied, the query saw a whole version, and version 2 is live with version 1 as previous
        #expect(results.filter { $0 }.count == 1)
        #expect(queried == 1 || queried == 2)
        #expect(after.version == 2 && after.previousVersion == 1 && after.state == .upToDate)
    }
}
