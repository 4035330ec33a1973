import Crypto
import FerryCore
import FerryPostgres
import FerryPublisher
import FerryServer
import FerryStore
import Foundation
import Logging
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// Versions stored as steps (docs/delta.md, "Checkpoints and steps"), end to end: the real publisher writes a
/// checkpoint and then only steps, and the real server builds each version it serves from the checkpoint and the
/// steps, byte for byte the file the publisher recorded.
@Suite(.serialized) struct CheckpointServingTests {
    struct World: Sendable {
        let database: TestDatabase
        let directory: TemporaryDirectory
        let templatePath: String
        var store: URL { directory.appending("store") }
        var snapshots: FileSnapshotStore { FileSnapshotStore(root: store) }

        func sql(_ text: String) throws { try database.connect().execute(text) }

        /// Publishes into `store` (steps until they pass 1000 % of the checkpoint's gzip copy, unless told).
        @discardableResult
        func publish(into store: URL? = nil, checkpointAt: Double = 10, full: Bool = false) async throws
            -> PublishResult
        {
            var configuration = Publisher.Configuration(
                templatePath: templatePath, databaseURL: database.url, store: store ?? self.store)
            configuration.checkpointAt = checkpointAt
            configuration.incremental = !full
            return try await Publisher(configuration: configuration, logger: .test).publish()
        }

        /// Changes `count` rows, starting at row `first`.
        func change(rows count: Int, from first: Int, round: Int) throws {
            try sql(
                """
                UPDATE trips SET name = 'Trip ' || id || ' round \(round)', passengers = passengers + 1,
                  "updatedAt" = now() WHERE id BETWEEN 'row-\(String(format: "%04d", first))'
                  AND 'row-\(String(format: "%04d", first + count - 1))'
                """)
        }
    }

    func withWorld(_ body: @Sendable (World) async throws -> Void) async throws {
        let database = try TestDatabase.trips("checkpoints", rows: 2000)
        let directory = try TemporaryDirectory("checkpoints")
        defer {
            database.drop()
            directory.remove()
        }
        let root = TestPaths.packageRoot
        let world = World(
            database: database, directory: directory,
            templatePath: root.appendingPathComponent("templates/trips.yml").path)
        try await body(world)
    }

    /// GET `path` with `Accept-Encoding: identity`: the status and the body.
    static func get(_ server: URL, _ path: String) async throws -> (Int, Data) {
        var request = URLRequest(url: server.appendingPathComponent(path))
        request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, data)
    }

    static func sha256(_ data: Data) -> String { SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined() }

    static func bytes(of directory: URL) throws -> Int64 {
        try FileManager.default.contentsOfDirectory(atPath: directory.path).reduce(Int64(0)) {
            $0 + (try FileSnapshotStore.fileSize(directory.appendingPathComponent($1)))
        }
    }

    @Test("a small change grows the store by about its patch, not by a file")
    func storeGrowsByThePatch() async throws {
        try await withWorld { world in
            try await world.publish()
            let objects = world.snapshots.objectsDirectory(dataset: "trips")
            let before = try Self.bytes(of: objects)
            try world.change(rows: 3, from: 10, round: 1)
            let result = try await world.publish()
            let record = try #require(try world.snapshots.requireManifest("trips").scopes[0].current)
            let step = try #require(record.step, "version \(result.version) is stored as a step")
            #expect(
                !FileManager.default.fileExists(atPath: objects.appendingPathComponent("\(record.sha256).sqlite").path))
            let grown = try Self.bytes(of: objects) - before
            #expect(grown <= 2 * step.size, "the store grew by \(grown) bytes; the step is \(step.size)")
            #expect(record.size > 100 * step.size, "the file is \(record.size) bytes")
            let manifest = try world.snapshots.requireManifest("trips")
            #expect(try world.snapshots.objectFileNames(dataset: "trips") == manifest.expectedObjectFileNames)
        }
    }

    @Test(
        "through a checkpoint and many steps, every served version is the recorded file, with the rows of a full build"
    )
    func servedBytesAreTheRecordedFile() async throws {
        try await withWorld { world in
            try await world.publish()
            try await withFerryServer(store: world.store) { server, wait in
                for round in 1...12 {
                    try world.change(rows: 5, from: 40 * round, round: round)
                    let result = try await world.publish()
                    try await wait(result.version)
                    let manifest = try world.snapshots.requireManifest("trips")
                    let record = manifest.scopes[0].current
                    #expect(record.step != nil, "round \(round)")
                    let (status, body) = try await Self.get(server, "v1/datasets/trips/versions/\(result.version)")
                    #expect(status == 200)
                    #expect(Self.sha256(body) == record.sha256, "round \(round): /versions/\(result.version)")
                    let (_, latest) = try await Self.get(server, "v1/datasets/trips/snapshot")
                    #expect(Self.sha256(latest) == record.sha256, "round \(round): /snapshot")
                    // The server's own gzip copy inflates to the same file.
                    let (gzipStatus, gzip) = try await Self.get(
                        server, "v1/datasets/trips/objects/\(record.sha256).sqlite.gz")
                    #expect(gzipStatus == 200)
                    var inflated = Data()
                    let inflater = try GzipInflater()
                    try inflater.inflate(gzip) { inflated.append(contentsOf: $0) }
                    try inflater.finish()
                    #expect(Self.sha256(inflated) == record.sha256, "round \(round): the gzip copy")
                }
                // The rows equal a build from scratch of the same data.
                let scratch = try await world.publish(into: world.directory.appending("scratch"), full: true)
                let current = try world.snapshots.requireManifest("trips").scopes[0].current
                #expect(scratch.manifest?.current.contentDigest == current.published.contentDigest)
            }
        }
    }

    @Test(
        "a server builds no file to serve a step version: the manifest names the checkpoint and its patch, and a version asked for whole is built on request, once, under the cache directory"
    )
    func coldServer() async throws {
        try await withWorld { world in
            try await world.publish()
            for round in 1...4 {
                try world.change(rows: 2, from: 7 * round, round: round)
                try await world.publish()
            }
            let current = try world.snapshots.requireManifest("trips").scopes[0].current
            let cache = world.directory.appending("build-cache")
            var builds = BuildSettings()
            builds.directory = cache
            try await withFerryServer(store: world.store, builds: builds) { server, wait in
                try await wait(current.version)
                let (_, manifestData) = try await Self.get(server, "v1/datasets/trips/manifest")
                let manifest = try Manifest.decode(manifestData)
                // Serving the version built nothing: a new device starts from the checkpoint and its patch.
                #expect(Self.builtFiles(cache).isEmpty)
                let checkpoint = try #require(manifest.checkpoint)
                let start = try #require(manifest.current.patch(from: checkpoint.version))
                #expect(checkpoint.version == 1 && start.base == checkpoint.sha256)
                #expect(manifest.current.gzipSize == checkpoint.gzipSize + start.size)
                #expect(manifest.versions == Array(1...current.version))
                // Asked for whole, the current version is built once into --cache-dir, byte for byte the published file.
                async let first = Self.get(server, "v1/datasets/trips/snapshot")
                async let second = Self.get(server, "v1/datasets/trips/versions/\(current.version)")
                let (one, two) = try await (first, second)
                #expect(Self.sha256(one.1) == current.sha256 && Self.sha256(two.1) == current.sha256)
                #expect(Self.builtFiles(cache).filter { $0.hasSuffix(".sqlite") } == ["\(current.sha256).sqlite"])
                let (older, olderBody) = try await Self.get(server, "v1/datasets/trips/versions/\(current.version - 1)")
                #expect(older == 200)
                #expect(!olderBody.isEmpty)
            }
        }
    }

    /// The files the server built under `cache` (every dataset), scratch excluded.
    static func builtFiles(_ cache: URL) -> [String] {
        let enumerator = FileManager.default.enumerator(atPath: cache.path)
        return ((enumerator?.allObjects as? [String]) ?? []).filter {
            !$0.contains("/tmp") && ($0.hasSuffix(".sqlite") || $0.hasSuffix(".gz"))
        }.map { ($0 as NSString).lastPathComponent }.sorted()
    }

    @Test(
        "a damaged step is refused when the version is built, naming the object, and the previous version stays served")
    func damagedStep() async throws {
        try await withWorld { world in
            try await world.publish()
            try world.change(rows: 2, from: 1, round: 1)
            try await world.publish()
            try await withFerryServer(store: world.store) { server, wait in
                try await wait(2)
                // Version 3 is published into a copy of the store, its step damaged, then the copy's step and
                // manifest are moved into the served store.
                let copy = world.directory.appending("copy")
                try FileManager.default.copyItem(at: world.store, to: copy)
                try world.change(rows: 2, from: 100, round: 2)
                try await world.publish(into: copy)
                let copyStore = FileSnapshotStore(root: copy)
                let manifest = try copyStore.requireManifest("trips")
                let step = try #require(manifest.scopes[0].current.step)
                let stepFile = copyStore.patchURL(dataset: "trips", sha256: step.sha256)
                var bytes = try Data(contentsOf: stepFile)
                bytes[bytes.count / 2] ^= 0x55
                try bytes.write(to: world.snapshots.patchURL(dataset: "trips", sha256: step.sha256))
                let builder = VersionBuilder(store: copyStore, cache: world.directory.appending("built"))
                try bytes.write(to: stepFile)
                #expect {
                    try builder.file(of: manifest.scopes[0].current, in: manifest.scopes[0], manifest: manifest)
                } throws: { error in
                    "\(error)".contains("objects/\(step.sha256).patch.gz") && "\(error)".contains("checksum")
                }
                try DurableFile.write(
                    try Data(contentsOf: copyStore.manifestURL(dataset: "trips")),
                    to: world.snapshots.manifestURL(dataset: "trips"))
                try await Task.sleep(for: .milliseconds(600))  // several polls of the server (every 100 ms)
                let (_, served) = try await Self.get(server, "v1/datasets/trips/manifest")
                #expect(try Manifest.decode(served).version == 2)
            }
        }
    }

    @Test("kill -9 of a server while it builds a version leaves the store as it was; the next server serves it")
    func killServerWhileBuilding() async throws {
        try await withWorld { world in
            try await world.publish()
            for round in 1...6 {
                try world.change(rows: 300, from: 11 * round, round: round)
                try await world.publish()
            }
            let manifest = try Data(contentsOf: world.snapshots.manifestURL(dataset: "trips"))
            let objects = try world.snapshots.objectFileNames(dataset: "trips")
            let current = try world.snapshots.requireManifest("trips").scopes[0].current
            #expect(!current.isCheckpoint)
            let temp = world.directory.appending("server-tmp")
            try FileManager.default.createDirectory(at: temp, withIntermediateDirectories: true)
            for round in 0..<4 {
                // Killed at some point of its start: reading the manifest, building version 7, or serving it
                let process = Process()
                process.executableURL = TestPaths.ferryBinary
                process.arguments = ["serve", "--store", world.store.path, "--port", "0"]
                process.environment = ProcessInfo.processInfo.environment.merging(["TMPDIR": temp.path]) { $1 }
                process.standardOutput = FileHandle.nullDevice
                process.standardError = FileHandle.nullDevice
                try process.run()
                try await Task.sleep(for: .milliseconds(40 + 60 * round))
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
                #expect(try Data(contentsOf: world.snapshots.manifestURL(dataset: "trips")) == manifest)
                #expect(try world.snapshots.objectFileNames(dataset: "trips") == objects)
            }
            let server = try await ServeProcess(store: world.store)
            #expect(try await server.waitForVersion("trips", current.version))
            let (_, body) = try await Self.get(server.url, "v1/datasets/trips/versions/\(current.version)")
            #expect(Self.sha256(body) == current.sha256)
            server.kill9()
        }
    }

    @Test("a checkpoint is cut by size and by age, and --keep counts checkpoints")
    func checkpointBySizeAndAge() async throws {
        try await withWorld { world in
            var configuration = Publisher.Configuration(
                templatePath: world.templatePath, databaseURL: world.database.url, store: world.store, keep: 2)
            configuration.checkpointAt = 0.05
            let publisher = Publisher(configuration: configuration, logger: .test)
            try await publisher.publish()
            try world.change(rows: 2, from: 1, round: 1)
            try await publisher.publish()
            var retained = try world.snapshots.requireManifest("trips").scopes[0].retained
            #expect(retained.map(\.isCheckpoint) == [true, false])
            // 600 of 2000 rows: the steps pass 5 % of the checkpoint's gzip copy.
            try world.change(rows: 600, from: 1000, round: 2)
            try await publisher.publish()
            retained = try world.snapshots.requireManifest("trips").scopes[0].retained
            #expect(retained.map(\.isCheckpoint) == [true, false, true])
            // By age: with --checkpoint-every 1s, the next version after a second is a checkpoint; --keep 2 then
            // drops the first checkpoint and the step after it.
            var aging = configuration
            aging.checkpointEvery = .seconds(1)
            try await Task.sleep(for: .milliseconds(1100))
            try world.change(rows: 1, from: 5, round: 3)
            try await Publisher(configuration: aging, logger: .test).publish()
            retained = try world.snapshots.requireManifest("trips").scopes[0].retained
            #expect(retained.map(\.isCheckpoint) == [true, true])
            #expect(retained.map(\.version) == [3, 4])
            let manifest = try world.snapshots.requireManifest("trips")
            #expect(try world.snapshots.objectFileNames(dataset: "trips") == manifest.expectedObjectFileNames)
        }
    }
}
