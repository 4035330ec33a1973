import FerryCore
import FerryStore
import Foundation
import Testing

@testable import FerryClient

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// kill -9 of `ferry fetch` and of `ferry serve` mid-download, with the built binaries.
@Suite struct ClientProcessTests {
    func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    /// Starts `ferry` with `arguments`, kills it with SIGKILL after `delay` seconds (if still running).
    /// With `until`, waits (up to 60 s) for that condition instead of the delay.
    /// Runs off the cooperative pool (see `offCooperativePool`).
    func runAndKill(_ arguments: [String], after delay: Double, until: (@Sendable () -> Bool)? = nil) async throws
        -> Bool
    {
        try await offCooperativePool { try Self.runAndKillBlocking(arguments, after: delay, until: until) }
    }

    static func runAndKillBlocking(_ arguments: [String], after delay: Double, until: (@Sendable () -> Bool)?) throws
        -> Bool
    {
        let process = Process()
        process.executableURL = TestPaths.ferryBinary
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        if let until {
            for _ in 0..<3000 where !until() && process.isRunning { usleep(20_000) }
        } else {
            usleep(UInt32(delay * 1_000_000))
        }
        let killed = process.isRunning
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        return killed
    }

    @Test func killFetchDuringDownloadAndVerification() async throws {
        let temp = try TemporaryDirectory("ferry-kill")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        let v1 = try fixtures.publish(rows: 5)
        let server = try await ServeProcess(store: fixtures.store.root)
        defer { server.kill9() }
        let dir = ClientDirectory(temp.appending("client"))
        let fetch = [
            "fetch", "--server", server.url.absoluteString, "--dataset", fixtures.dataset, "--dir", dir.url.path,
        ]

        // Given version 1 live
        #expect(try await runFerry(fetch).status == 0)
        // And a 40 MiB version 2 on the server
        let v2 = try fixtures.publish(rows: 6, blobMiB: 40)
        let published = [v1, v2]
        #expect(try await server.waitForVersion(fixtures.dataset, 2), "the server never served version 2")

        // When a rate-limited fetch is killed mid-download
        #expect(
            try await runAndKill(fetch + ["--limit-rate", "16M"], after: 0) {
                (FileIdentity.size(of: dir.partial) ?? 0) > 4 << 20
            })

        // Then database.db is still exactly version 1, and part of version 2's gzip copy is kept
        #expect(try publishedVersion(of: dir.database, among: published) == 1)
        let kept = FileIdentity.size(of: dir.partialGzip) ?? 0
        #expect(kept > 0 && kept < v2.gzipSize)
        #expect(!dir.exists(dir.updated))

        // And the next fetch completes the job, resuming instead of starting over
        let resumed = try await runFerry(fetch + ["--json"])
        #expect(resumed.status == 0, "\(resumed.stderr)")
        let object = try json(resumed.stdout)
        #expect(object["result"] as? String == "updateDownloaded")
        #expect((object["resumedFrom"] as? Int ?? 0) >= Int(kept))
        #expect((object["bytesReceived"] as? Int ?? Int.max) < Int(v2.gzipSize))
        #expect(object["fileBytes"] as? Int == Int(v2.size))
        #expect(object["encoding"] as? String == "gzip")
        #expect(object["pendingVersion"] as? Int == 2)
        #expect(try publishedVersion(of: dir.updated, among: published) == 2)

        // kill -9 at random instants of `ferry fetch --apply` (download, verification, rename, swap)
        for round in 0..<6 {
            try FileManager.default.removeItem(at: dir.url)
            try dir.create()
            try FileManager.default.copyItem(at: fixtures.snapshotFile(1), to: dir.database)
            _ = try await runAndKill(fetch + ["--apply"], after: 0.2 + Double(round) * 0.3 + Double.random(in: 0..<0.3))
            let live = try publishedVersion(of: dir.database, among: published)
            #expect(live == 1 || live == 2, "round \(round)")
            let again = try await runFerry(fetch + ["--apply"])
            #expect(again.status == 0, "round \(round): \(again.stderr)")
            #expect(try publishedVersion(of: dir.database, among: published) == 2, "round \(round)")
        }
    }

    /// `ferry serve` killed mid-download: the next fetch, from a restarted server, resumes from the byte it had.
    /// (URLSession on Linux cannot pause the transfer, so the body is all in memory before the kill: see
    /// ``TransportKind/pausingTransfers``.)
    @Test(arguments: TransportKind.pausingTransfers) func serverStopsMidDownloadThenResumes(_ kind: TransportKind)
        async throws
    {
        let temp = try TemporaryDirectory("ferry-kill")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        let manifest = try fixtures.publish(rows: 5, blobMiB: 24)
        let dir = ClientDirectory(temp.appending("client"))
        func configuration(_ url: URL) -> FerryClient.Configuration {
            var configuration = FerryClient.Configuration(directory: dir.url, serverURL: url, dataset: fixtures.dataset)
            configuration.download.maxBytesPerSecond = 8 << 20
            return configuration
        }

        // Given a download under way
        let server = try await ServeProcess(store: fixtures.store.root)
        let client = try await FerryClient.open(
            configuration: configuration(server.url).using(kind.shared), logger: .test)
        let progress = ProgressLog()
        let download = Task { try await client.checkForUpdates { progress.append($0) } }
        for _ in 0..<600 where (progress.values.last?.bytesReceived ?? 0) < 2 << 20 {
            try await Task.sleep(for: .milliseconds(50))
        }

        // When the server dies
        server.kill9()
        let error = await #expect(throws: FerryError.self) { try await download.value }
        #expect(error?.code == .offline)
        await client.close()
        let kept = FileIdentity.size(of: kind.carriesGzip ? dir.partialGzip : dir.partial) ?? 0
        #expect(kept > 0 && kept < kind.wireSize(manifest))
        #expect(!dir.exists(dir.database))

        // Then the next fetch (server restarted, on another port) transfers only the rest
        let restarted = try await ServeProcess(store: fixtures.store.root)
        defer { restarted.kill9() }
        var fast = configuration(restarted.url)
        fast.download.maxBytesPerSecond = nil
        let again = try await FerryClient.open(configuration: fast.using(kind.shared), logger: .test)
        let result = try await again.checkForUpdates()
        await again.close()
        #expect(result.outcome == .initialSync)
        #expect(result.check.resumedFrom == kept)
        #expect(result.bytesReceived == kind.wireSize(manifest) - kept)
        #expect(
            result.download?.fileBytes == manifest.size
                && result.download?.encoding == (kind.carriesGzip ? .gzip : .identity))
        #expect(try publishedVersion(of: dir.database, among: [manifest]) == 1)
    }
}
