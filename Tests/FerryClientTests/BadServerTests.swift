import AsyncHTTPClient
import FerryClientNIO
import FerryCore
import Foundation
import Logging
import NIOCore
import Testing

@testable import FerryClient

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

        func open(_ server: URL, _ kind: TransportKind) async throws -> FerryClient {
            try await FerryClient.open(
                configuration: .init(directory: clientDir, serverURL: server, dataset: fixtures.dataset).using(
                    kind.shared), logger: .test)
        }

        func expectNothingInstalled() {
            let dir = ClientDirectory(clientDir)
            #expect(!dir.exists(dir.database))
            #expect(!dir.exists(dir.updated))
        }
    }

    func fetchError(_ setup: Setup, _ behavior: HostileServer.Behavior, _ kind: TransportKind) async throws
        -> FerryError?
    {
        let server = try HostileServer(
            snapshot: setup.fixtures.snapshotFile(setup.manifest.version), behavior: behavior)
        return try await server.run { url in
            let client = try await setup.open(url, kind)
            defer { Task { await client.close() } }
            do {
                _ = try await client.checkForUpdates()
                return nil
            } catch let error as FerryError {
                return error
            }
        }
    }

    @Test(arguments: TransportKind.allCases) func wrongBytesAreDetected(_ kind: TransportKind) async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let error = try await fetchError(setup, .wrongBytes, kind)
        #expect(error?.code == .checksumMismatch)
        setup.expectNothingInstalled()
        // The bad download is discarded, so the next fetch starts from zero.
        #expect(!FileManager.default.fileExists(atPath: ClientDirectory(setup.clientDir).partial.path))
    }

    /// A valid gzip stream whose content is not the promised file: the SHA-256 of the inflated bytes catches it.
    /// URLSession asked for `identity`, and the session inflated the gzip it got anyway: the body then is no gzip
    /// stream as its `Content-Encoding` says, which is caught before any hashing.
    @Test(arguments: TransportKind.allCases) func gzipOfWrongBytesIsDetected(_ kind: TransportKind) async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let error = try await fetchError(setup, .gzipOfWrongBytes, kind)
        #expect(
            error?.code == (kind.carriesGzip ? .checksumMismatch : .corruptTransfer), "\(String(describing: error))")
        setup.expectNothingInstalled()
        let dir = ClientDirectory(setup.clientDir)
        for file in [dir.partial, dir.partialGzip, dir.partialRecord] {
            #expect(!dir.exists(file), "\(file.lastPathComponent)")
        }
    }

    @Test(arguments: TransportKind.allCases) func truncatedBodyIsDetected(_ kind: TransportKind) async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let error = try await fetchError(setup, .truncatedBody, kind)
        #expect(error?.code == .checksumMismatch)
        setup.expectNothingInstalled()
    }

    @Test(arguments: TransportKind.allCases) func notSQLiteIsDetected(_ kind: TransportKind) async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let error = try await fetchError(setup, .notSQLite, kind)
        #expect(error?.code == .notSQLite)
        setup.expectNothingInstalled()
    }

    @Test(arguments: TransportKind.allCases) func responseWithoutChecksumIsRefused(_ kind: TransportKind) async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let error = try await fetchError(setup, .noChecksum, kind)
        #expect(error?.code == .corruptTransfer)
        setup.expectNothingInstalled()
    }

    @Test(arguments: TransportKind.allCases) func unreachableServerIsOffline(_ kind: TransportKind) async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        // A port nothing listens on; a short connect timeout (AsyncHTTPClient retries until it).
        let transport = try kind.make(connectTimeout: .seconds(1))
        let client = try await FerryClient.open(
            configuration: .init(
                directory: setup.clientDir, serverURL: URL(string: "http://127.0.0.1:9")!,
                dataset: setup.fixtures.dataset
            ).using(transport.snapshot), logger: .test)
        let error = await #expect(throws: FerryError.self) { try await client.checkForUpdates() }
        await client.close()
        try await transport.shutdown()
        #expect(error?.code == .offline)
        setup.expectNothingInstalled()
    }

    /// A server that dies mid-body leaves a partial file; nothing is installed; the partial is resumable.
    @Test(arguments: TransportKind.allCases) func droppedConnectionKeepsThePartialForResume(_ kind: TransportKind)
        async throws
    {
        let setup = try Setup(blobMiB: 4)
        defer { setup.temp.remove() }
        let error = try await fetchError(setup, .dropsMidway, kind)
        #expect(error != nil)
        setup.expectNothingInstalled()
        let dir = ClientDirectory(setup.clientDir)
        let kept = FileIdentity.size(of: dir.partial) ?? 0
        #expect(kept > 0 && kept < setup.manifest.size)
    }

    /// A server that ignores Range sends the whole file again: the client restarts from byte 0 and verifies.
    @Test(arguments: TransportKind.allCases) func serverIgnoringRangeRestartsFromZero(_ kind: TransportKind)
        async throws
    {
        let setup = try Setup(blobMiB: 2)
        defer { setup.temp.remove() }
        try plantPartial(setup, bytes: Int(setup.manifest.size / 3))
        let server = try HostileServer(snapshot: setup.fixtures.snapshotFile(1), behavior: .ignoresRange)
        let result = try await server.run { url in
            let client = try await setup.open(url, kind)
            let result = try await client.checkForUpdates()
            await client.close()
            return result
        }
        #expect(result.outcome == .initialSync)
        #expect(result.check.resumedFrom == 0)
        #expect(result.bytesReceived == setup.manifest.size)
        #expect(await server.log.ranges.first! != nil, "the client asked for a range")
        #expect(try publishedVersion(of: ClientDirectory(setup.clientDir).database, among: [setup.manifest]) == 1)
    }

    /// A 206 whose Content-Range does not start where the client asked: discarded, then one clean full request.
    @Test(arguments: TransportKind.allCases) func partialContentAtTheWrongOffsetIsRejected(_ kind: TransportKind)
        async throws
    {
        let setup = try Setup(blobMiB: 2)
        defer { setup.temp.remove() }
        try plantPartial(setup, bytes: Int(setup.manifest.size / 2))
        let server = try HostileServer(snapshot: setup.fixtures.snapshotFile(1), behavior: .wrongRangeStart)
        let result = try await server.run { url in
            let client = try await setup.open(url, kind)
            let result = try await client.checkForUpdates()
            await client.close()
            return result
        }
        let ranges = await server.log.ranges
        #expect(ranges.count == 2)
        #expect(ranges.first! == "bytes=\(setup.manifest.size / 2)-")
        #expect(ranges.last! == nil)
        #expect(result.outcome == .initialSync)
        #expect(result.check.resumedFrom == 0)
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
            expected: ExpectedSnapshot(
                sha256: setup.manifest.sha256, size: setup.manifest.size, version: setup.manifest.version))
        try JSONEncoder().encode(record).write(to: dir.partialRecord)
    }
}
