import FerryCore
import FerryStore
import Foundation
import Testing

@testable import FerryClient

/// The client against the real Ferry server (in process, port 0) over real published stores.
@Suite struct ClientServerTests {
    struct Setup {
        let temp: TemporaryDirectory
        let fixtures: SnapshotFixtures
        var dir: ClientDirectory { ClientDirectory(temp.appending("client")) }

        init() throws {
            temp = try TemporaryDirectory("ferry-client")
            fixtures = SnapshotFixtures(root: temp.appending("store"))
        }

        func open(_ url: URL, _ kind: TransportKind, accept: Set<Int>? = nil, applyOnLaunch: Bool = false) async throws
            -> FerryClient
        {
            var configuration = FerryClient.Configuration(
                directory: dir.url, serverURL: url, dataset: fixtures.dataset, acceptedSchemaVersions: accept)
            configuration.update.applyOnOpen = applyOnLaunch
            return try await FerryClient.open(configuration: configuration.using(kind.shared), logger: .test)
        }

        /// The first `bytes` of published `version`, planted as an interrupted download leaves them.
        func plantPartial(_ manifest: Manifest, bytes: Int, corruptAt: Int? = nil) throws {
            try dir.create()
            var data = try Data(contentsOf: fixtures.snapshotFile(manifest.version))
            if bytes > data.count { data.append(Data(count: bytes - data.count)) }
            data = data.prefix(bytes)
            if let corruptAt { data[corruptAt] ^= 0x5A }
            try data.write(to: dir.partial)
            let record = PartialRecord(
                dataset: fixtures.dataset,
                expected: ExpectedSnapshot(sha256: manifest.sha256, size: manifest.size, version: manifest.version))
            try JSONEncoder().encode(record).write(to: dir.partialRecord)
        }
    }

    @Test(arguments: TransportKind.allCases) func initialSyncThen304ThenPendingReplacedByNewerThenApplyAndRollback(
        _ kind: TransportKind
    ) async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let first = try setup.fixtures.publish()
        try await withFerryServer(store: setup.fixtures.store.root) { url, waitForVersion in
            var published = [first]
            let client = try await setup.open(url, kind)
            defer { Task { await client.close() } }

            // Initial sync: straight to database.db
            var result = try await client.checkForUpdates()
            #expect(result.outcome == .initialSync)
            #expect(result.download?.version == 1 && result.download?.sha256 == published[0].sha256)
            // The server has a gzip copy: the bytes on the wire are those of the gzip copy, the file is the SQLite file
            // (URLSession asks for the file itself: it would inflate the gzip copy behind the client's back)
            if kind.carriesGzip {
                #expect(result.bytesReceived == published[0].gzipSize && result.download?.encoding == .gzip)
            } else {
                #expect(result.bytesReceived == published[0].size && result.download?.encoding == .identity)
            }
            #expect(result.download?.fileBytes == published[0].size)
            #expect(
                result.status == ClientStatus(state: .upToDate, version: 1, sha256: published[0].sha256, path: .full))
            #expect(try publishedVersion(of: setup.dir.database, among: published) == 1)
            #expect(!setup.dir.exists(setup.dir.partial) && !setup.dir.exists(setup.dir.partialRecord))

            // 304: nothing changes, nothing transferred
            result = try await client.checkForUpdates()
            #expect(result.outcome == .notModified && result.bytesReceived == 0)

            // A new version becomes updated.db; database.db is untouched
            published.append(try setup.fixtures.publish(rows: 7))
            try await waitForVersion(2)
            result = try await client.checkForUpdates()
            #expect(result.outcome == .updateDownloaded && result.download?.version == 2)
            #expect(
                result.status.state == .updatePending && result.status.version == 1 && result.status.pendingVersion == 2
            )
            #expect(try publishedVersion(of: setup.dir.database, among: published) == 1)

            // A newer one replaces the pending one
            published.append(try setup.fixtures.publish(rows: 9))
            try await waitForVersion(3)
            result = try await client.checkForUpdates()
            #expect(result.outcome == .updateDownloaded && result.download?.version == 3)
            #expect(result.status.pendingVersion == 3 && result.status.pendingSha256 == published[2].sha256)
            #expect(try publishedVersion(of: setup.dir.updated, among: published) == 3)
            // If-None-Match now carries the pending checksum: 304
            #expect(try await client.checkForUpdates().outcome == .notModified)

            // Apply, then roll back: the rolled-back version is not downloaded again, a newer one is
            try await client.applyPendingUpdate()
            #expect(try publishedVersion(of: setup.dir.database, among: published) == 3)
            try await client.rollback()
            #expect(try publishedVersion(of: setup.dir.database, among: published) == 1)
            result = try await client.checkForUpdates()
            #expect(result.outcome == .notModified && result.bytesReceived == 0)
            published.append(try setup.fixtures.publish(rows: 11))
            try await waitForVersion(4)
            result = try await client.checkForUpdates()
            #expect(result.outcome == .updateDownloaded && result.download?.version == 4)
        }
    }

    @Test(arguments: TransportKind.allCases) func schemaVersionNotAcceptedIsRefusedAndNotDownloadedAgain(
        _ kind: TransportKind
    ) async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        try setup.fixtures.publish(schemaVersion: 1)
        try await withFerryServer(store: setup.fixtures.store.root) { url, waitForVersion in
            let client = try await setup.open(url, kind, accept: [2])
            defer { Task { await client.close() } }
            let error = await #expect(throws: FerryError.self) { try await client.checkForUpdates() }
            #expect(error?.code == .schemaVersion)
            #expect(!setup.dir.exists(setup.dir.database) && !setup.dir.exists(setup.dir.updated))
            #expect(!setup.dir.exists(setup.dir.partial))
            // The refused snapshot travels in If-None-Match: 304, no bytes
            let again = try await client.checkForUpdates()
            #expect(again.outcome == .notModified && again.bytesReceived == 0)
            // A snapshot of an accepted schema version is taken
            try setup.fixtures.publish(schemaVersion: 2)
            try await waitForVersion(2)
            let result = try await client.checkForUpdates()
            #expect(result.outcome == .initialSync && result.download?.version == 2)
        }
    }

    @Test(arguments: TransportKind.allCases) func interruptedDownloadResumesFromTheByteItHad(_ kind: TransportKind)
        async throws
    {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let manifest = try setup.fixtures.publish(blobMiB: 4)
        let kept = Int(manifest.size / 3)
        try setup.plantPartial(manifest, bytes: kept)
        let progress = ProgressLog()
        try await withFerryServer(store: setup.fixtures.store.root) { url, _ in
            let client = try await setup.open(url, kind)
            let result = try await client.checkForUpdates { progress.append($0) }
            await client.close()
            #expect(result.outcome == .initialSync)
            #expect(result.check.resumedFrom == Int64(kept))
            #expect(result.bytesReceived == manifest.size - Int64(kept))
            #expect(try publishedVersion(of: setup.dir.database, among: [manifest]) == 1)
        }
        let seen = progress.values
        #expect(seen.first?.bytesReceived == Int64(kept) && seen.first?.resumedFrom == Int64(kept))
        #expect(
            seen.last
                == FetchProgress(bytesReceived: manifest.size, totalBytes: manifest.size, resumedFrom: Int64(kept)))
    }

    /// A server that dies mid-body (hostile stand-in), then the real server: the download resumes where it broke off.
    @Test(arguments: TransportKind.allCases) func serverDyingMidDownloadThenResume(_ kind: TransportKind) async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let manifest = try setup.fixtures.publish(blobMiB: 4)
        let dying = try HostileServer(snapshot: setup.fixtures.snapshotFile(1), behavior: .dropsMidway)
        try await dying.run { url in
            let client = try await setup.open(url, kind)
            await #expect(throws: FerryError.self) { try await client.checkForUpdates() }
            await client.close()
        }
        let kept = FileIdentity.size(of: setup.dir.partial) ?? 0
        #expect(kept > 0 && kept < manifest.size)
        try await withFerryServer(store: setup.fixtures.store.root) { url, _ in
            let client = try await setup.open(url, kind)
            let result = try await client.checkForUpdates()
            await client.close()
            #expect(result.check.resumedFrom == kept)
            #expect(result.bytesReceived == manifest.size - kept)
            #expect(try publishedVersion(of: setup.dir.database, among: [manifest]) == 1)
        }
    }

    @Test(arguments: TransportKind.allCases) func wrongBytesInThePartialAreDetectedThenRefetched(_ kind: TransportKind)
        async throws
    {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let manifest = try setup.fixtures.publish(blobMiB: 2)
        try setup.plantPartial(manifest, bytes: Int(manifest.size / 2), corruptAt: 5000)
        try await withFerryServer(store: setup.fixtures.store.root) { url, _ in
            let client = try await setup.open(url, kind)
            defer { Task { await client.close() } }
            let error = await #expect(throws: FerryError.self) { try await client.checkForUpdates() }
            #expect(error?.code == .checksumMismatch)
            #expect(!setup.dir.exists(setup.dir.database) && !setup.dir.exists(setup.dir.partial))
            let result = try await client.checkForUpdates()
            #expect(
                result.outcome == .initialSync && result.check.resumedFrom == 0
                    && result.bytesReceived == kind.wireSize(manifest))
        }
    }

    @Test(arguments: TransportKind.allCases) func partialLongerThanTheSnapshotIsDiscarded(_ kind: TransportKind)
        async throws
    {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let manifest = try setup.fixtures.publish()
        try setup.plantPartial(manifest, bytes: Int(manifest.size) + 100)
        try await withFerryServer(store: setup.fixtures.store.root) { url, _ in
            let client = try await setup.open(url, kind)
            let result = try await client.checkForUpdates()
            await client.close()
            #expect(result.outcome == .initialSync && result.check.resumedFrom == 0)
            #expect(try publishedVersion(of: setup.dir.database, among: [manifest]) == 1)
        }
    }

    /// A crash after the download finished but before the rename: the next fetch installs it without downloading.
    @Test(arguments: TransportKind.allCases) func completeDownloadLeftByACrashIsInstalled(_ kind: TransportKind)
        async throws
    {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let v1 = try setup.fixtures.publish()
        let v2 = try setup.fixtures.publish(rows: 8)
        try setup.dir.create()
        try FileManager.default.copyItem(at: setup.fixtures.snapshotFile(1), to: setup.dir.database)
        try setup.plantPartial(v2, bytes: Int(v2.size))
        try await withFerryServer(store: setup.fixtures.store.root) { url, _ in
            let client = try await setup.open(url, kind)
            let result = try await client.checkForUpdates()
            await client.close()
            #expect(result.outcome == .updateDownloaded && result.download?.version == 2 && result.bytesReceived == 0)
            #expect(try publishedVersion(of: setup.dir.database, among: [v1, v2]) == 1)
            #expect(try publishedVersion(of: setup.dir.updated, among: [v1, v2]) == 2)
        }
    }

    @Test(arguments: TransportKind.allCases) func concurrentChecksShareOneDownload(_ kind: TransportKind) async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let manifest = try setup.fixtures.publish(blobMiB: 2)
        try await withFerryServer(store: setup.fixtures.store.root) { url, _ in
            let client = try await setup.open(url, kind)
            async let first = client.checkForUpdates()
            async let second = client.checkForUpdates()
            let results = try await [first, second]
            await client.close()
            #expect(results.allSatisfy { $0.status.state == .upToDate && $0.status.version == 1 })
            // One shared check: both callers get its result (a second, separate check would have been a 304).
            #expect(results[0] == results[1])
            #expect(
                results.allSatisfy {
                    $0.outcome == .initialSync && $0.bytesReceived == kind.wireSize(manifest)
                        && $0.download?.fileBytes == manifest.size
                })
        }
    }

    @Test(arguments: TransportKind.allCases) func openAppliesAPendingUpdateAtLaunch(_ kind: TransportKind) async throws
    {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let v1 = try setup.fixtures.publish()
        try await withFerryServer(store: setup.fixtures.store.root) { url, waitForVersion in
            var client = try await setup.open(url, kind)
            _ = try await client.checkForUpdates()
            let v2 = try setup.fixtures.publish(rows: 12)
            try await waitForVersion(2)
            #expect(try await client.checkForUpdates().outcome == .updateDownloaded)
            await client.close()
            // Next launch: applied before any connection is handed out
            client = try await setup.open(url, kind, applyOnLaunch: true)
            let version = try await client.withDatabase { try $0.scalar("SELECT version FROM ferry_snapshot")?.integer }
            await client.close()
            #expect(version == 2)
            #expect(try publishedVersion(of: setup.dir.previous, among: [v1, v2]) == 1)
        }
    }
}

/// Collects progress callbacks (called from the download task).
final class ProgressLog: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [FetchProgress] = []
    func append(_ progress: FetchProgress) {
        lock.lock()
        items.append(progress)
        lock.unlock()
    }
    var values: [FetchProgress] {
        lock.lock()
        defer { lock.unlock() }
        return items
    }
}
