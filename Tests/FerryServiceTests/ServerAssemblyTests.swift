import FerryBucket
import FerryCore
import FerryPostgres
import FerryPublisher
import FerryServer
import FerryService
import FerryTestSupport
import Foundation
import Logging
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `ferry serve` is a ``ServeConfiguration`` run by a ``ServerAssembly``: these tests build the server from the value
/// alone, as an embedding program would, without the CLI.
@Suite("Server assembly")
struct ServerAssemblyTests {
    static let templates = TestPaths.packageRoot.appendingPathComponent("templates")

    @Test("a server that publishes in-process serves the version it published, into a store it made")
    func publishesAndServes() async throws {
        // Given a database with the trips table and a store directory that does not exist yet
        let database = try TestDatabase.create("assembly")
        defer { database.drop() }
        try database.connect().execute(
            String(contentsOf: Self.templates.appendingPathComponent("trips.pg.sql"), encoding: .utf8))
        let directory = try TemporaryDirectory("assembly")
        defer { directory.remove() }
        let storeURL = directory.appending("store")
        var server = ServerConfiguration(storePath: storeURL, port: 0)
        server.database = .init(
            templatePaths: [Self.templates.appendingPathComponent("trips.yml")], databaseURL: database.url)
        var configuration = ServeConfiguration(server: server, store: .directory(storeURL))
        configuration.publishing = .init(trigger: .interval(.seconds(3600)))

        // When the assembly starts and runs
        let (urls, announce) = AsyncStream<String>.makeStream()
        let assembly = try await ServerAssembly.start(configuration, logger: Logger(label: "test")) {
            announce.yield($0)
        }
        let running = Task { try await assembly.run() }
        defer { running.cancel() }
        let base = try #require(await urls.first { _ in true })

        // Then the manifest of the version its schedule published is served, at once (no catalog poll waited for)
        let manifestURL = try #require(URL(string: "\(base)/v1/datasets/trips/manifest"))
        let deadline = ContinuousClock.now + .seconds(60)
        var manifest: Manifest?
        while manifest == nil && ContinuousClock.now < deadline {
            let (data, response) = try await URLSession.shared.data(from: manifestURL)
            if (response as? HTTPURLResponse)?.statusCode == 200 {
                manifest = try JSONDecoder().decode(Manifest.self, from: data)
            } else {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        #expect(manifest?.current.version == 1)
        #expect(FileManager.default.fileExists(atPath: storeURL.appendingPathComponent("trips/manifest.json").path))
    }

    @Test("schema lines into a bucket are refused naming the dataset, before anything starts")
    func linesIntoABucketAreRefused() async throws {
        let paths = ["trips.v1.yml", "trips.v2.yml"].map { Self.templates.appendingPathComponent($0) }
        var server = ServerConfiguration(storePath: URL(fileURLWithPath: "/nonexistent"), port: 0)
        server.database = .init(templatePaths: paths, databaseURL: "postgres://nobody@127.0.0.1:1/none")
        var configuration = ServeConfiguration(
            server: server, store: try StoreLocation(parsing: "s3://ferry-test-bucket/prefix"))
        configuration.publishing = .init(trigger: .onChange())
        do {
            _ = try await ServerAssembly.start(configuration, logger: Logger(label: "test"))
            Issue.record("the assembly started")
        } catch let error as FerryError {
            #expect(error.code == .badInput && error.key == "store")
            #expect(error.message.contains("dataset 'trips'"), "\(error.message)")
        }
    }

    @Test("publish settings give one publisher per dataset, its schema lines together, in the order given")
    func publishersPerDataset() throws {
        let paths = ["trips.v1.yml", "campgrounds.yml", "trips.v2.yml"].map {
            Self.templates.appendingPathComponent($0).path
        }
        var settings = PublishSettings(
            store: .directory(URL(fileURLWithPath: "/tmp/store")), databaseURL: "postgres://x@127.0.0.1/db")
        settings.policy.keep = 3
        let publishers = try settings.publishers(templatePaths: paths, logger: Logger(label: "test"))
        #expect(publishers.map(\.dataset) == ["trips", "campgrounds"])
        #expect(publishers[0].publisher.configuration.templatePaths == [paths[0], paths[2]])
        #expect(publishers.allSatisfy { $0.publisher.configuration.keep == 3 })

        // A template that cannot be read names its file
        let missing = "/nonexistent/ferry-template.yml"
        #expect(throws: FerryError.self) {
            try settings.publishers(templatePaths: [missing], logger: Logger(label: "t"))
        }
    }
}
