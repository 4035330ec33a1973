import FerryCore
import FerryGRDB
import FerryStore
import Foundation
import GRDB
import Testing

@testable import FerryClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The hand-off of a download the app ran itself (a background `URLSession` on Apple platforms): Ferry names the
/// version and the request, a URLSession download task writes the file, and Ferry verifies it as any download before
/// it becomes `database.db` or `updated.db`. Against the real server; the download task is an ordinary one, as a
/// background session's cannot run here, and what Ferry sees of it (a finished file) is the same.
@Suite struct BackgroundDownloadTests {
    struct Setup {
        let temp: TemporaryDirectory
        let fixtures: SnapshotFixtures
        var dir: ClientDirectory { ClientDirectory(temp.appending("client")) }

        init() throws {
            temp = try TemporaryDirectory("ferry-background")
            fixtures = SnapshotFixtures(root: temp.appending("store"))
        }

        func open(_ url: URL) async throws -> FerryClient {
            var configuration = FerryClient.Configuration(directory: dir.url, serverURL: url, dataset: fixtures.dataset)
            configuration.update.applyOnOpen = false
            return try await FerryClient.open(configuration: configuration, logger: .test)
        }

        /// Runs `request` as a URLSession download task and moves the finished file to `name` in the temp directory,
        /// as a background session's delegate must before it returns. Returns the file and the response's status.
        func download(_ request: URLRequest, to name: String) async throws -> (URL, Int) {
            let destination = temp.appending(name)
            let session = URLSession(configuration: .ephemeral)
            defer { session.finishTasksAndInvalidate() }
            let status: Int = try await withCheckedThrowingContinuation { continuation in
                let task = session.downloadTask(with: request) { location, response, error in
                    do {
                        if let error { throw error }
                        guard let location, let response = response as? HTTPURLResponse else {
                            throw FerryError(.network, "the download task finished without a file or a response")
                        }
                        try FileManager.default.moveItem(at: location, to: destination)
                        continuation.resume(returning: response.statusCode)
                    } catch {
                        continuation.resume(throwing: error)
                    }
                }
                task.resume()
            }
            return (destination, status)
        }

        /// The names in `.ferry` a verification may leave (`adopted-*`): none, once an adoption has returned.
        func adoptionLeftovers() throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: dir.url.appendingPathComponent(".ferry").path)
                .filter { $0.hasPrefix(ClientDirectory.adoptedPrefix) }
        }
    }

    @Test("a background download is verified, becomes the initial sync, then the pending update; then nothing is new")
    func goodFilesAreAdopted() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let v1 = try setup.fixtures.publish(rows: 4)
        try await withFerryServer(store: setup.fixtures.store.root) { url, waitForVersion in
            let client = try await setup.open(url)
            defer { Task { await client.close() } }

            // Given a new device: Ferry names version 1 and the request for it
            let first = try #require(try await client.prepareBackgroundDownload())
            #expect(first.manifest == v1)
            #expect(first.url.absoluteString == "\(url.absoluteString)/v1/datasets/trips/versions/1")
            let request = try await client.backgroundRequest(for: first)
            #expect(request.value(forHTTPHeaderField: "Accept-Encoding") == "identity")
            #expect(request.value(forHTTPHeaderField: "Authorization") == nil)
            // The app keeps it with the task: it survives JSON
            let kept = try JSONDecoder().decode(BackgroundDownload.self, from: try JSONEncoder().encode(first))
            #expect(kept == first)

            // When the download task has written the file and the app hands it over
            let (file, status) = try await setup.download(request, to: "v1.sqlite")
            #expect(status == 200)
            #expect(FileIdentity.size(of: file) == v1.size)
            let adopted = try await client.adoptBackgroundDownload(kept, file: file)

            // Then it is the initial sync: database.db holds version 1, and the file was taken
            #expect(
                adopted.outcome == .initialSync && adopted.download?.version == 1
                    && adopted.download?.sha256 == v1.sha256)
            #expect(
                adopted.bytesReceived == v1.size && adopted.download?.encoding == .identity
                    && adopted.download?.path == .full)
            #expect(try publishedVersion(of: setup.dir.database, among: [v1]) == 1)
            #expect(try await client.withDatabase { try $0.scalar("SELECT count(*) FROM trips")?.integer } == 4)
            #expect(!FileManager.default.fileExists(atPath: file.path))
            #expect(try await client.prepareBackgroundDownload() == nil)

            // Given version 2, whose manifest names its content digest (as the publisher's do)
            let v2 = try setup.fixtures.publish(rows: 6)
            try await waitForVersion(2)
            var second = try #require(try await client.prepareBackgroundDownload())
            #expect(second.manifest == v2)
            let digest = try ContentDigest.compute(
                try SQLiteConnection(path: try setup.fixtures.snapshotFile(2).path, mode: .readOnly),
                tables: ["blobs", "trips"])
            second.manifest.current.contentDigest = digest.description

            // When it is downloaded and handed over
            let (file2, _) = try await setup.download(try await client.backgroundRequest(for: second), to: "v2.sqlite")
            let update = try await client.adoptBackgroundDownload(second, file: file2)

            // Then it waits as updated.db, as after checkForUpdates(), with the digest kept for the next patch
            #expect(update.outcome == .updateDownloaded && update.download?.version == 2)
            #expect(update.status.version == 1 && update.status.pendingVersion == 2)
            #expect(try publishedVersion(of: setup.dir.updated, among: [v1, v2]) == 2)
            let state = ClientStateFile.load(from: setup.dir.stateFile) { Issue.record("\($0)") }
            #expect(state.arrival(of: v2.sha256)?.contentDigest == digest.description)
            #expect(try await client.prepareBackgroundDownload() == nil)
            // Adopting the same version again changes nothing
            let (again, _) = try await setup.download(
                try await client.backgroundRequest(for: second), to: "v2-again.sqlite")
            #expect(try await client.adoptBackgroundDownload(second, file: again).outcome == .notModified)

            let applied = try await client.applyPendingUpdate()
            #expect(applied.applied && applied.version == 2 && applied.previousVersion == 1)

            // A download of version 1 that finishes only now is verified but not installed: never back to older data
            let (late, _) = try await setup.download(
                try await client.backgroundRequest(for: first), to: "v1-late.sqlite")
            let stale = try await client.adoptBackgroundDownload(first, file: late)
            #expect(stale.outcome == .notModified && stale.status.version == 2 && stale.status.pendingVersion == nil)
            #expect(!FileManager.default.fileExists(atPath: setup.dir.updated.path))
            #expect(try publishedVersion(of: setup.dir.database, among: [v1, v2]) == 2)
            #expect(try setup.adoptionLeftovers().isEmpty)
        }
    }

    @Test("with FerryGRDB in .automatic, an adopted download is applied in place under the open pool at once")
    func adoptedIntoTheAppsPool() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        try setup.fixtures.publish(rows: 4)
        try await withFerryServer(store: setup.fixtures.store.root) { url, waitForVersion in
            let configuration = FerryClient.Configuration(
                directory: setup.dir.url, serverURL: url, dataset: setup.fixtures.dataset)
            let ferry = try await FerryDatabase.open(configuration: configuration, applyMode: .automatic, logger: .test)
            let count = { @Sendable in
                try await ferry.pool.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM trips") }
            }

            // The initial sync arrives by a background download, into the app's pool
            let first = try #require(try await ferry.client.prepareBackgroundDownload())
            let (file, _) = try await setup.download(
                try await ferry.client.backgroundRequest(for: first), to: "v1.sqlite")
            #expect(try await ferry.adoptBackgroundDownload(first, file: file).outcome == .initialSync)
            #expect(try await count() == 4)
            #expect(ferry.currentStatus.version == 1)

            // So does version 2: applied at once, nothing left pending
            try setup.fixtures.publish(rows: 6)
            try await waitForVersion(2)
            let second = try #require(try await ferry.client.prepareBackgroundDownload())
            let (file2, _) = try await setup.download(
                try await ferry.client.backgroundRequest(for: second), to: "v2.sqlite")
            #expect(try await ferry.adoptBackgroundDownload(second, file: file2).outcome == .updateDownloaded)
            #expect(try await count() == 6)
            #expect(ferry.currentStatus.version == 2 && ferry.currentStatus.pendingVersion == nil)
            #expect(!FileManager.default.fileExists(atPath: setup.dir.updated.path))
            try await ferry.close()
        }
    }

    @Test("a corrupted background download is refused with a clear error and deleted; nothing else changes")
    func corruptedFileIsRefused() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let v1 = try setup.fixtures.publish(rows: 4)
        try await withFerryServer(store: setup.fixtures.store.root) { url, waitForVersion in
            let client = try await setup.open(url)
            defer { Task { await client.close() } }
            #expect(try await client.checkForUpdates().outcome == .initialSync)
            let v2 = try setup.fixtures.publish(rows: 6)
            try await waitForVersion(2)
            let download = try #require(try await client.prepareBackgroundDownload())
            let request = try await client.backgroundRequest(for: download)
            let before = try await client.status()
            let liveBytes = try Data(contentsOf: setup.dir.database)

            // Given the finished file with one byte flipped (a storage fault, a proxy that rewrote it)
            let (file, _) = try await setup.download(request, to: "v2.sqlite")
            var bytes = try Data(contentsOf: file)
            bytes[bytes.count / 2] ^= 0x5A
            try bytes.write(to: file)

            // When the app hands it over, then it is refused, saying what was wrong, and deleted
            let error = await #expect(throws: FerryError.self) {
                try await client.adoptBackgroundDownload(download, file: file)
            }
            #expect(error?.code == .checksumMismatch)
            #expect(
                error?.message.contains("the background download of version 2 was not adopted") == true,
                "\(String(describing: error))")
            #expect(error?.message.contains("server promised \(v2.sha256)") == true, "\(String(describing: error))")
            #expect(!FileManager.default.fileExists(atPath: file.path))

            // And nothing changed: the same live version and bytes, nothing pending, no scratch left
            #expect(try await client.status() == before)
            #expect(try Data(contentsOf: setup.dir.database) == liveBytes)
            #expect(!FileManager.default.fileExists(atPath: setup.dir.updated.path))
            #expect(try setup.adoptionLeftovers().isEmpty)

            // A file of another dataset's download is refused before it is touched
            let (intact, _) = try await setup.download(request, to: "v2-intact.sqlite")
            var foreign = download
            foreign.manifest.dataset = "other"
            let mismatch = await #expect(throws: FerryError.self) {
                try await client.adoptBackgroundDownload(foreign, file: intact)
            }
            #expect(mismatch?.code == .badInput)
            #expect(FileManager.default.fileExists(atPath: intact.path))

            // The refusal poisoned nothing: the intact file is adopted
            #expect(try await client.adoptBackgroundDownload(download, file: intact).outcome == .updateDownloaded)
            #expect(try publishedVersion(of: setup.dir.updated, among: [v1, v2]) == 2)
        }
    }
}
