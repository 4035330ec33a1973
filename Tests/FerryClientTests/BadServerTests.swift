import FerryCore
import Foundation
import Logging
import Testing

@testable import FerryClient
import NIOCore
import AsyncHTTPClient

/// Corrupted transfers from a wrong or hostile server are detected and never become updated.db or database.db.
@Suite struct BadServerTests {
    /// A published snapshot (real file in a real store) and a client directory, both in a temp dir.
    struct Setup {
        let temp: TemporaryDirectory
        let fixtures: SnapshotFixtures
        let manifest: Manifest
        var clientDir: URL { temp.appending("client") }

        init(blobMiB: Int = 1) throws {
            temp = try TemporaryDirectory("ferry-client")
            fixtures = SnapshotFixtures(root: temp.appending("store"))
            manifest = try fixtures.publish(rows: 5, blobMiB: blobMiB)
        }

        func open(_ server: URL) async throws -> FerryClient {
            try await FerryClient.open(
                configuration: .init(directory: clientDir, serverURL: server, dataset: fixtures.dataset), logger: .test)
        }

        func expectNothingInstalled() {
            let dir = ClientDirectory(clientDir)
            #expect(!dir.exists(dir.database))
            #expect(!dir.exists(dir.updated))
        }
    }

    func fetchError(_ setup: Setup, _ behavior: HostileServer.Behavior) async throws -> FerryError? {
        let server = try HostileServer(snapshot: setup.fixtures.snapshotFile(setup.manifest.version), behavior: behavior)
        return try await server.run { url in
            let client = try await setup.open(url)
            defer { Task { await client.close() } }
            do {
                _ = try await client.checkForUpdates()
                return nil
            } catch let error as FerryError {
                return error
            }
        }
    }

    @Test func wrongBytesAreDetected() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let error = try await fetchError(setup, .wrongBytes)
        #expect(error?.code == .checksumMismatch)
        setup.expectNothingInstalled()
        // The bad download is discarded, so the next fetch starts from zero.
        #expect(!FileManager.default.fileExists(atPath: ClientDirectory(setup.clientDir).partial.path))
    }

    /// A valid gzip stream whose content is not the promised file: the SHA-256 of the inflated bytes catches it.
    @Test func gzipOfWrongBytesIsDetected() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let error = try await fetchError(setup, .gzipOfWrongBytes)
        #expect(error?.code == .checksumMismatch)
        setup.expectNothingInstalled()
        let dir = ClientDirectory(setup.clientDir)
        for file in [dir.partial, dir.partialGzip, dir.partialRecord] { #expect(!dir.exists(file), "\(file.lastPathComponent)") }
    }

    @Test func truncatedBodyIsDetected() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let error = try await fetchError(setup, .truncatedBody)
        #expect(error?.code == .checksumMismatch)
        setup.expectNothingInstalled()
    }

    @Test func notSQLiteIsDetected() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let error = try await fetchError(setup, .notSQLite)
        #expect(error?.code == .notSQLite)
        setup.expectNothingInstalled()
    }

    @Test func responseWithoutChecksumIsRefused() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let error = try await fetchError(setup, .noChecksum)
        #expect(error?.code == .corruptTransfer)
        setup.expectNothingInstalled()
    }

    @Test func unreachableServerIsOffline() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        // A port nothing listens on; a short connect timeout (AsyncHTTPClient retries until it).
        let http = AsyncHTTPClientTransport.makeHTTPClient(connectTimeout: .seconds(1))
        let client = try await FerryClient.open(
            configuration: .init(directory: setup.clientDir, serverURL: URL(string: "http://127.0.0.1:9")!, dataset: setup.fixtures.dataset),
            logger: .test, transport: AsyncHTTPClientTransport(client: http))
        let error = await #expect(throws: FerryError.self) { try await client.checkForUpdates() }
        await client.close()
        try await http.shutdown()
        #expect(error?.code == .offline)
        setup.expectNothingInstalled()
    }

    /// A server that dies mid-body leaves a partial file; nothing is installed; the partial is resumable.
    @Test func droppedConnectionKeepsThePartialForResume() async throws {
        let setup = try Setup(blobMiB: 4)
        defer { setup.temp.remove() }
        let error = try await fetchError(setup, .dropsMidway)
        #expect(error != nil)
        setup.expectNothingInstalled()
        let dir = ClientDirectory(setup.clientDir)
        let kept = FileIdentity.size(of: dir.partial) ?? 0
        #expect(kept > 0 && kept < setup.manifest.size)
    }

    /// A server that ignores Range sends the whole file again: the client restarts from byte 0 and verifies.
    @Test func serverIgnoringRangeRestartsFromZero() async throws {
        let setup = try Setup(blobMiB: 2)
        defer { setup.temp.remove() }
        try plantPartial(setup, bytes: Int(setup.manifest.size / 3))
        let server = try HostileServer(snapshot: setup.fixtures.snapshotFile(1), behavior: .ignoresRange)
        let result = try await server.run { url in
            let client = try await setup.open(url)
            let result = try await client.checkForUpdates()
            await client.close()
            return result
        }
        #expect(result.outcome == .initialSync)
        #expect(result.resumedFrom == 0)
        #expect(result.bytesReceived == setup.manifest.size)
        #expect(await server.log.ranges.first! != nil, "the client asked for a range")
        #expect(try publishedVersion(of: ClientDirectory(setup.clientDir).database, among: [setup.manifest]) == 1)
    }

    /// A 206 whose Content-Range does not start where the client asked: discarded, then one clean full request.
    @Test func partialContentAtTheWrongOffsetIsRejected() async throws {
        let setup = try Setup(blobMiB: 2)
        defer { setup.temp.remove() }
        try plantPartial(setup, bytes: Int(setup.manifest.size / 2))
        let server = try HostileServer(snapshot: setup.fixtures.snapshotFile(1), behavior: .wrongRangeStart)
        let result = try await server.run { url in
            let client = try await setup.open(url)
            let result = try await client.checkForUpdates()
            await client.close()
            return result
        }
        let ranges = await server.log.ranges
        #expect(ranges.count == 2)
        #expect(ranges.first! == "bytes=\(setup.manifest.size / 2)-")
        #expect(ranges.last! == nil)
        #expect(result.outcome == .initialSync)
        #expect(result.resumedFrom == 0)
        #expect(try publishedVersion(of: ClientDirectory(setup.clientDir).database, among: [setup.manifest]) == 1)
    }

    /// Puts the first `bytes` of the published file in the partial area, as an interrupted download would.
    func plantPartial(_ setup: Setup, bytes: Int) throws {
        let dir = ClientDirectory(setup.clientDir)
        try dir.create()
        let data = try Data(contentsOf: setup.fixtures.snapshotFile(setup.manifest.version)).prefix(bytes)
        try data.write(to: dir.partial)
        let record = PartialRecord(
            dataset: setup.fixtures.dataset,
            expected: ExpectedSnapshot(sha256: setup.manifest.sha256, size: setup.manifest.size, version: setup.manifest.version))
        try JSONEncoder().encode(record).write(to: dir.partialRecord)
    }
}
