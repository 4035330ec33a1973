import FerryCore
import FerryStore
import Foundation
import Testing

@testable import FerryClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The client against the real Ferry server serving a store of schema lines (`trips.v2`, published as such), through
/// a transport that records every request and answers 410 on the paths a test names (to meet a 410 at a chosen
/// request, a version download with a partial kept). Everything else is the real server's answer.
@Suite struct SchemaLineServerTests {
    /// The real transport behind a recorder and the paths answered 410.
    struct LineTransport: HTTPTransport {
        let inner: any HTTPTransport
        let requests = Locked<[TransportRequest]>([])
        /// Paths (prefixes) answered 410 with the server's error body.
        let retired = Locked<[String]>([])

        func send<Result: Sendable>(
            _ request: TransportRequest, _ handle: (TransportResponseHead, TransportResponseBody) async throws -> Result
        ) async throws -> Result {
            requests.withLock { $0.append(request) }
            let path = request.url.path
            if retired.current.contains(where: { path.hasPrefix($0) }) {
                let body = Data(
                    #"{"error":{"code":"gone","message":"no accepted line is live; lines served: 3"}}"#.utf8)
                let sent = Locked(false)
                return try await handle(
                    TransportResponseHead(status: 410, headers: ["content-type": "application/json"]),
                    TransportResponseBody {
                        sent.withLock { done in
                            defer { done = true }
                            return done ? nil : body
                        }
                    })
            }
            return try await inner.send(request, handle)
        }
    }

    struct Setup {
        let temp: TemporaryDirectory
        let fixtures: SnapshotFixtures
        var dir: ClientDirectory { ClientDirectory(temp.appending("client")) }

        init() throws {
            temp = try TemporaryDirectory("ferry-lines")
            fixtures = SnapshotFixtures(root: temp.appending("store"), dataset: "trips.v2")
        }

        func open(_ url: URL, _ transport: LineTransport) async throws -> FerryClient {
            var configuration = FerryClient.Configuration(
                directory: dir.url, serverURL: url, dataset: "trips", acceptedSchemaVersions: [2, 1])
            configuration.update.applyOnOpen = false
            configuration.push.onOpen = false
            return try await FerryClient.open(configuration: configuration.using(transport), logger: .test)
        }
    }

    @Test(arguments: TransportKind.allCases) func aFetchFollowsTheLineTheManifestNames(_ kind: TransportKind)
        async throws
    {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let first = try setup.fixtures.publish(schemaVersion: 2)
        try await withFerryServer(store: setup.fixtures.store.root, dataset: "trips.v2") { url, waitForVersion in
            let transport = LineTransport(inner: kind.shared)
            let client = try await setup.open(url, transport)
            defer { Task { await client.close() } }

            // The check asks for the dataset with the accepted schema versions; the version comes from the line.
            var result = try await client.checkForUpdates()
            #expect(
                result.outcome == .initialSync && result.download?.version == 1
                    && result.download?.sha256 == first.sha256)
            let db = try SQLiteConnection(path: setup.dir.database.path, mode: .readOnly)
            #expect(try SnapshotMetadata.read(from: db).dataset == "trips.v2")
            var paths = transport.requests.current.map { $0.url.path + ($0.url.query.map { "?" + $0 } ?? "") }
            #expect(paths == ["/v1/datasets/trips/manifest?schema=1,2", "/v1/datasets/trips.v2/versions/1"])

            // Every request carries the directory's device id.
            let deviceID = try await client.deviceID()
            #expect(transport.requests.current.allSatisfy { $0.headers["Ferry-Device"] == deviceID })

            // The next checks still ask the base URL, and the directory holding a line is the dataset's.
            result = try await client.checkForUpdates()
            #expect(result.outcome == .notModified)
            _ = try setup.fixtures.publish(rows: 5, schemaVersion: 2)
            try await waitForVersion(2)
            result = try await client.checkForUpdates()
            #expect(result.outcome == .updateDownloaded && result.download?.version == 2)
            paths = transport.requests.current.map { $0.url.path + ($0.url.query.map { "?" + $0 } ?? "") }
            #expect(
                paths.suffix(3) == [
                    "/v1/datasets/trips/manifest?schema=1,2", "/v1/datasets/trips/manifest?schema=1,2",
                    "/v1/datasets/trips.v2/versions/2",
                ])
            #expect(transport.requests.current.allSatisfy { $0.headers["Ferry-Device"] == deviceID })

            // A background download names the line's version URL, and its request carries the device id.
            _ = try setup.fixtures.publish(rows: 6, schemaVersion: 2)
            try await waitForVersion(3)
            let download = try #require(try await client.prepareBackgroundDownload())
            #expect(download.url.path == "/v1/datasets/trips.v2/versions/3")
            let request = try await client.backgroundRequest(for: download)
            #expect(request.value(forHTTPHeaderField: "Ferry-Device") == deviceID)
        }
    }

    @Test func a410KeepsTheDatabaseThePendingUpdateAndThePartialDownload() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        _ = try setup.fixtures.publish(schemaVersion: 2)
        try await withFerryServer(store: setup.fixtures.store.root, dataset: "trips.v2") { url, waitForVersion in
            let transport = LineTransport(inner: TransportKind.urlSession.shared)
            let client = try await setup.open(url, transport)
            defer { Task { await client.close() } }
            _ = try await client.checkForUpdates()
            _ = try setup.fixtures.publish(rows: 4, schemaVersion: 2)
            try await waitForVersion(2)
            #expect(try await client.checkForUpdates().outcome == .updateDownloaded)
            let pending = try Data(contentsOf: setup.dir.updated)
            let live = try Data(contentsOf: setup.dir.database)

            // Given a partial download of version 3, when the line's versions are retired
            let third = try setup.fixtures.publish(rows: 9, schemaVersion: 2)
            try await waitForVersion(3)
            let bytes = try Data(contentsOf: setup.fixtures.snapshotFile(3)).prefix(1000)
            try bytes.write(to: setup.dir.partial)
            let record = PartialRecord(
                dataset: "trips.v2",
                expected: ExpectedSnapshot(sha256: third.sha256, size: third.size, version: 3))
            try JSONEncoder().encode(record).write(to: setup.dir.partialRecord)
            transport.retired.withLock { $0 = ["/v1/datasets/trips.v2/"] }

            // Then the check fails with schemaRetired, naming the dataset and passing on the server's message
            var error = await #expect(throws: FerryError.self) { try await client.checkForUpdates() }
            #expect(error?.code == .schemaRetired)
            #expect(error?.message.contains("too old for dataset 'trips'") == true)
            #expect(error?.message.contains("lines served: 3") == true)

            // And the same when the manifest itself is 410 (no accepted line is live)
            transport.retired.withLock { $0 = ["/v1/datasets/trips/manifest"] }
            error = await #expect(throws: FerryError.self) { try await client.checkForUpdates() }
            #expect(error?.code == .schemaRetired)

            // And nothing local moved
            #expect(try Data(contentsOf: setup.dir.database) == live)
            #expect(try Data(contentsOf: setup.dir.updated) == pending)
            #expect(try Data(contentsOf: setup.dir.partial) == bytes)
            #expect(setup.dir.exists(setup.dir.partialRecord))
        }
    }

    /// Against the real server's line resolution (no stand-in): an old app build gets line 1; its update, accepting
    /// 1 and 2, moves the device to line 2 by a full download; the status page counts the device on each line; once
    /// line 1 is retired, a build that accepts only it gets schemaRetired and keeps its data.
    @Test func anAppUpdateMovesTheDeviceToTheNewerLineAndARetiredLineIsSchemaRetired() async throws {
        let temp = try TemporaryDirectory("ferry-lines")
        defer { temp.remove() }
        let root = temp.appending("store")
        let lineOne = SnapshotFixtures(root: root, dataset: "trips.v1")
        let lineTwo = SnapshotFixtures(root: root, dataset: "trips.v2")
        _ = try lineOne.publish(schemaVersion: 1)
        let two = try lineTwo.publish(rows: 5, schemaVersion: 2)
        let dir = ClientDirectory(temp.appending("client"))
        try await withFerryServer(store: root, dataset: "trips.v1", statusToken: "status-secret") { url, _ in
            var config = FerryClient.Configuration(
                directory: dir.url, serverURL: url, dataset: "trips", acceptedSchemaVersions: [1])
            config.update.applyOnOpen = false
            config.push.onOpen = false
            func dataset(_ file: URL) throws -> String {
                try SnapshotMetadata.read(from: try SQLiteConnection(path: file.path, mode: .readOnly)).dataset
            }

            // Given the old build, on line 1
            let old = try await FerryClient.open(configuration: config, logger: .test)
            #expect(try await old.checkForUpdates().outcome == .initialSync)
            #expect(try dataset(dir.database) == "trips.v1")
            #expect(try await old.checkForUpdates().outcome == .notModified)
            let deviceID = try await old.deviceID()
            await old.close()

            // When the app update accepts line 2 too, the next check moves it there: a full download, then applied
            config.acceptedSchemaVersions = [1, 2]
            let updated = try await FerryClient.open(configuration: config, logger: .test)
            #expect(try await updated.deviceID() == deviceID)
            let moved = try await updated.checkForUpdates()
            #expect(
                moved.outcome == .updateDownloaded && moved.download?.sha256 == two.sha256
                    && moved.download?.path == .full)
            #expect(try await updated.applyPendingUpdate().applied)
            #expect(try dataset(dir.database) == "trips.v2")
            #expect(try await updated.checkForUpdates().outcome == .notModified)
            await updated.close()

            // The status page counts the device once on each line it asked for
            var request = URLRequest(url: url.appendingPathComponent("status.json"))
            request.setValue("Bearer status-secret", forHTTPHeaderField: "Authorization")
            let (data, _) = try await URLSession.shared.data(for: request)
            let report = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            let lines = (report["datasets"] as? [[String: Any]] ?? []).reduce(into: [String: Int]()) {
                if let name = $1["name"] as? String { $0[name] = $1["devices24h"] as? Int }
            }
            #expect(lines["trips.v1"] == 1 && lines["trips.v2"] == 1, "\(lines)")

            // When line 1 is retired (waited for on the wire), a build that accepts only line 1 is told to update
            #expect(try FileSnapshotStore(root: root).retire(line: "trips.v1", at: Timestamp.format(Date())))
            let manifest = url.appendingPathComponent("v1/datasets/trips.v1/manifest")
            let deadline = ContinuousClock.now + .seconds(20)
            func status() async throws -> Int? {
                (try await URLSession.shared.data(from: manifest).1 as? HTTPURLResponse)?.statusCode
            }
            while try await status() != 410, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            let live = try Data(contentsOf: dir.database)
            config.acceptedSchemaVersions = [1]
            let stale = try await FerryClient.open(configuration: config, logger: .test)
            defer { Task { await stale.close() } }
            let error = await #expect(throws: FerryError.self) { try await stale.checkForUpdates() }
            #expect(error?.code == .schemaRetired)
            #expect(error?.message.contains("too old for dataset 'trips'") == true)
            #expect(error?.message.contains("lines served: 2") == true, "\(String(describing: error))")
            #expect(try Data(contentsOf: dir.database) == live)
        }
    }
}
