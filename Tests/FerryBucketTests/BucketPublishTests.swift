import FerryCore
import FerryPostgres
import FerryPublisher
import FerryS3
import FerryStore
import FerryTestSupport
import Foundation
import Logging
import Testing

@testable import FerryBucket

/// `ferry publish --store s3://…` against the SeaweedFS and PostgreSQL of scripts/test.
@Suite struct BucketPublishTests {
    /// A fresh database with table `t`, a fresh bucket, a temp dir with the template.
    struct Fixture {
        let database: TestDatabase
        let directory: TemporaryDirectory
        let s3: S3Client
        let bucket: String
        let dataset: String
        let template: String

        init(_ label: String, rows: Int = 100) async throws {
            database = try TestDatabase.create(label)
            directory = try TemporaryDirectory("ferry-bucket-\(label)")
            (s3, bucket) = try await SeaweedFS.freshBucket(label)
            dataset = label
            try database.connect().execute(
                "CREATE TABLE t (id integer PRIMARY KEY, v text); "
                    + "INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, \(rows)) g;")
            template = directory.appending("template.yml").path
            try "dataset: \(label)\ntables: [{name: t}]\n".write(
                toFile: template, atomically: true, encoding: .utf8)
        }

        var store: String { "s3://\(bucket)/pre" }
        var layout: BucketLayout { BucketLayout(location: try! S3Location(parsing: store)) }

        func environment(secret: String? = nil) throws -> [String: String] {
            [
                "AWS_ACCESS_KEY_ID": try SeaweedFS.variable("FERRY_TEST_S3_ACCESS_KEY"),
                "AWS_SECRET_ACCESS_KEY": try secret ?? SeaweedFS.variable("FERRY_TEST_S3_SECRET_KEY"),
                "AWS_ENDPOINT_URL": "", "AWS_SESSION_TOKEN": "",
            ]
        }

        /// `ferry publish --json` into the bucket with cache `cache` (a name in the temp dir).
        func publish(cache: String, _ extra: [String] = []) async throws -> ProcessResult {
            try await runFerry(
                [
                    "publish", "--config", template, "--database-url", database.url, "--store", store,
                    "--s3-endpoint", try SeaweedFS.variable("FERRY_TEST_S3_ENDPOINT"), "--cache-dir",
                    directory.appending(cache).path, "--json",
                ] + extra, environment: try environment())
        }

        /// The JSON of a successful publish.
        func publishJSON(cache: String, _ extra: [String] = []) async throws -> [String: Any] {
            let run = try await publish(cache: cache, extra)
            #expect(run.status == 0, "\(run.stderr)")
            return try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
        }

        func read(_ key: String) async throws -> Data {
            guard case .object(let object) = try await s3.get(bucket: bucket, key: key) else {
                throw FerryError(.notFound, "GET \(key) answered 304")
            }
            return object.body
        }

        func manifest() async throws -> StoredManifest {
            try StoredManifest.decode(try await read(layout.manifestKey(dataset: dataset)))
        }

        /// The object names in `DATASET/objects/`.
        func objects() async throws -> Set<String> {
            let prefix = layout.objectsPrefix(dataset: dataset)
            return Set(try await s3.list(bucket: bucket, prefix: prefix).map { String($0.key.dropFirst(prefix.count)) })
        }

        /// Every object the manifest names exists, and each has the SHA-256 its name (or its record) promises.
        func checkBucket() async throws {
            let manifest = try await manifest()
            let objects = try await objects()
            for record in manifest.scopes.flatMap(\.chain) {
                for patch in (record.patches ?? []) + (record.step.map { [$0] } ?? []) {
                    #expect(objects.contains("\(patch.sha256).patch.gz"))
                }
                // A checkpoint has its full files; any other version only its step (docs/delta.md).
                guard record.isCheckpoint else {
                    #expect(!objects.contains("\(record.sha256).sqlite") && record.step != nil)
                    continue
                }
                #expect(objects.contains("\(record.sha256).sqlite") && objects.contains("\(record.sha256).sqlite.gz"))
                let gzip = try await read(layout.objectKey(dataset: dataset, name: "\(record.sha256).sqlite.gz"))
                #expect(Int64(gzip.count) == record.published.gzipSize)
            }
            for name in objects where name.hasSuffix(".sqlite") || name.hasSuffix(".patch.gz") {
                let body = try await read(layout.objectKey(dataset: dataset, name: name))
                #expect(FileDigest.sha256Hex(bytes: Array(body)) == name.split(separator: ".").first.map(String.init))
            }
        }

        func execute(_ sql: String) throws { try database.connect().execute(sql) }

        func cleanUp() {
            database.drop()
            directory.remove()
        }
    }

    /// Flags for today's retention: every version a checkpoint, no history (`--keep` counts versions).
    static let everyVersionInFull = ["--checkpoint-at", "0", "--patch-horizon", "0"]

    @Test("publish into a fresh bucket, again unchanged, then one row changed: version 2 with a patch")
    func publishUnchangedAndPatch() async throws {
        let fixture = try await Fixture("bpub")
        defer { fixture.cleanUp() }

        let first = try await fixture.publishJSON(cache: "cache")
        #expect(first["version"] as? Int == 1 && first["unchanged"] as? Bool == false)
        let moved = try #require(first["bucket"] as? [String: Any])
        #expect(moved["uploaded"] as? Int == 3)  // .sqlite, .sqlite.gz, .rows
        #expect((moved["uploadedBytes"] as? Int ?? 0) > 0)
        try await fixture.checkBucket()
        let objects = try await fixture.objects()
        #expect(objects.contains("\(try #require(first["sha256"] as? String)).rows"))

        let again = try await fixture.publishJSON(cache: "cache")
        #expect(again["unchanged"] as? Bool == true && again["version"] as? Int == 1)
        #expect((again["bucket"] as? [String: Any])?["uploaded"] as? Int == 0)
        #expect(try await fixture.objects() == objects)

        try fixture.execute("UPDATE t SET v = 'changed' WHERE id = 7")
        let second = try await fixture.publishJSON(cache: "cache")
        #expect(second["version"] as? Int == 2)
        let manifest = try await fixture.manifest()
        let patches = try #require(manifest.entry(for: nil)?.current.patches)
        #expect(patches.map(\.from) == [1])
        // Version 2 is stored as its step, the patch from 1: that one object and the manifest are all it uploads
        #expect(manifest.entry(for: nil)?.current.step == patches[0])
        #expect((second["bucket"] as? [String: Any])?["uploaded"] as? Int == 1)
        #expect((second["bucket"] as? [String: Any])?["uploadedBytes"] as? Int == Int(patches[0].size))
        #expect(try await fixture.objects().contains("\(patches[0].sha256).patch.gz"))
        try await fixture.checkBucket()

        // The text output says what moved; version 3 is a checkpoint cut by size (its step passes 0.001 % of the
        // checkpoint's gzip copy): its full files go up, and its step, which carries the history on
        try fixture.execute("UPDATE t SET v = 'again' WHERE id = 8")
        let text = try await runFerry(
            [
                "publish", "--config", fixture.template, "--database-url", fixture.database.url, "--store",
                fixture.store, "--s3-endpoint", try SeaweedFS.variable("FERRY_TEST_S3_ENDPOINT"), "--cache-dir",
                fixture.directory.appending("cache").path, "--checkpoint-at", "0.001%",
            ], environment: try fixture.environment())
        #expect(text.status == 0, "\(text.stderr)")
        #expect(text.stdout.contains("published version 3") && text.stdout.contains("object(s) uploaded"))
        let third = try #require(try await fixture.manifest().entry(for: nil)?.current)
        #expect(third.isCheckpoint && third.step?.from == 2)
        try await fixture.checkBucket()
    }

    @Test("two publishers race on one bucket: one wins, the other fails and changes nothing")
    func racingPublishers() async throws {
        let fixture = try await Fixture("brace")
        defer { fixture.cleanUp() }
        _ = try await fixture.publishJSON(cache: "a")
        try fixture.execute("UPDATE t SET v = 'changed' WHERE id = 3")

        // Publisher A reads the manifest; before it writes its own, publisher B (another cache) publishes.
        let s3 = try SeaweedFS.client()
        var configuration = Publisher.Configuration(
            templatePath: fixture.template, databaseURL: fixture.database.url, store: fixture.directory.appending("a"))
        configuration.keep = 5
        var loser = BucketPublisher(
            configuration: configuration, s3: s3, layout: fixture.layout, objectGrace: .seconds(3600))
        let winner = Locked("")
        loser.beforeManifestWrite = {
            let run = try await fixture.publish(cache: "b")
            winner.withLock { $0 = run.stdout }
        }
        let error = await #expect(throws: FerryError.self) { try await loser.publish(changedTables: nil) }
        #expect(error?.message == "another publisher changed brace; nothing was published")
        let won = try #require(
            try JSONSerialization.jsonObject(with: Data(winner.current.utf8)) as? [String: Any])
        #expect(won["version"] as? Int == 2)
        let manifest = try await fixture.manifest()
        #expect(manifest.lastVersion == 2 && manifest.entry(for: nil)?.current.sha256 == won["sha256"] as? String)
        try await fixture.checkBucket()

        // The loser's cache was ahead of the bucket; its next run repairs it and finds nothing new.
        let next = try await fixture.publishJSON(cache: "a")
        #expect(next["unchanged"] as? Bool == true && next["version"] as? Int == 2)
    }

    @Test("a publisher with an empty disk builds incrementally from the bucket's current version")
    func coldPublisherBuildsIncrementally() async throws {
        let fixture = try await Fixture("bcold", rows: 20_000)
        defer { fixture.cleanUp() }
        let first = try await fixture.publishJSON(cache: "warm")
        try fixture.execute("UPDATE t SET v = 'changed' WHERE id = 11")

        let cold = try await fixture.publishJSON(cache: "cold")
        #expect(cold["version"] as? Int == 2)
        // Built from version 1's file and row index, fetched from the bucket.
        let incremental = try #require(cold["incremental"] as? [String: Int])
        #expect(incremental["updated"] == 1 && incremental["unchanged"] == 19_999)
        let moved = try #require(cold["bucket"] as? [String: Any])
        #expect((moved["downloaded"] as? Int ?? 0) >= 2)
        #expect((moved["notes"] as? [Any] ?? []).isEmpty)
        let manifest = try await fixture.manifest()
        let current = try #require(manifest.entry(for: nil)?.current)
        let patch = try #require(current.patches?.first)
        #expect(patch.from == 1 && patch.base == first["sha256"] as? String)
        #expect(patch.size * 20 < Int64(first["gzipSize"] as? Int ?? 0))
        // Version 2 is a step: the bucket holds its patch, not its file
        #expect(current.step == patch)
        try await fixture.checkBucket()

        // A second cold publisher builds version 2's file from the bucket's checkpoint and step, then publishes
        // version 3 as a step from it
        try fixture.execute("UPDATE t SET v = 'again' WHERE id = 12")
        let colder = try await fixture.publishJSON(cache: "colder")
        #expect(colder["version"] as? Int == 3)
        let third = try #require(try await fixture.manifest().entry(for: nil)?.current)
        #expect(third.step?.from == 2 && third.step?.base == current.sha256)
        try await fixture.checkBucket()
    }

    @Test("retention: unreferenced objects stay for the grace period, go with 0s; stale multipart uploads are aborted")
    func retentionWithGrace() async throws {
        let fixture = try await Fixture("bkeep")
        defer { fixture.cleanUp() }
        let first = try await fixture.publishJSON(cache: "c", Self.everyVersionInFull + ["--keep", "1"])
        let v1 = try #require(first["sha256"] as? String)
        let stale = try await fixture.s3.createMultipartUpload(
            bucket: fixture.bucket, key: fixture.layout.objectKey(dataset: "bkeep", name: "leftover.sqlite"))

        try fixture.execute("UPDATE t SET v = 'changed' WHERE id = 5")
        let second = try await fixture.publishJSON(cache: "c", Self.everyVersionInFull + ["--keep", "1"])
        #expect(second["version"] as? Int == 2)
        #expect((second["bucket"] as? [String: Any])?["deleted"] as? Int == 0)
        var objects = try await fixture.objects()
        #expect(objects.contains("\(v1).sqlite") && objects.contains("\(v1).sqlite.gz"))
        let listed =
            try JSONSerialization.jsonObject(
                with: try await fixture.read(
                    BucketPublisher(
                        configuration: .init(templatePath: "", databaseURL: "", store: URL(fileURLWithPath: "/")),
                        s3: fixture.s3, layout: fixture.layout
                    ).unreferencedKey(dataset: "bkeep"))) as? [String: String]
        #expect(listed?.keys.contains("\(v1).sqlite") == true)
        #expect(
            try await fixture.s3.listMultipartUploads(bucket: fixture.bucket, prefix: "").map(\.uploadID) == [stale])

        let third = try await fixture.publishJSON(
            cache: "c", Self.everyVersionInFull + ["--keep", "1", "--object-grace", "0s"])
        #expect(third["unchanged"] as? Bool == true)
        let moved = try #require(third["bucket"] as? [String: Any])
        #expect((moved["deleted"] as? Int ?? 0) >= 3)  // v1's .sqlite, .sqlite.gz and .rows
        #expect(moved["abortedUploads"] as? Int == 1)
        objects = try await fixture.objects()
        #expect(!objects.contains { $0.hasPrefix(v1) })
        #expect(try await fixture.s3.listMultipartUploads(bucket: fixture.bucket, prefix: "").isEmpty)
        try await fixture.checkBucket()
    }

    @Test("a file above the threshold goes up as a multipart upload and reads back byte-identical")
    func multipartUpload() async throws {
        let fixture = try await Fixture("bmulti", rows: 300_000)
        defer { fixture.cleanUp() }
        let cache = fixture.directory.appending("cache")
        var publisher = BucketPublisher(
            configuration: .init(templatePath: fixture.template, databaseURL: fixture.database.url, store: cache),
            s3: try SeaweedFS.client(), layout: fixture.layout, objectGrace: .seconds(0))
        publisher.multipartThreshold = 1 << 20
        publisher.partSize = 5 << 20
        publisher.partsInFlight = 2
        let result = try await publisher.publish(changedTables: nil)
        let sha256 = try #require(result.sha256)
        let size = try #require(result.size)
        #expect(size > 10 << 20)  // at least three parts
        let local = try Data(
            contentsOf: FileSnapshotStore(root: cache).objectURL(dataset: "bmulti", sha256: sha256))
        let remote = try await fixture.read(fixture.layout.objectKey(dataset: "bmulti", name: "\(sha256).sqlite"))
        #expect(remote == local)
        #expect(FileDigest.sha256Hex(bytes: Array(remote)) == sha256)
        #expect(try await fixture.s3.listMultipartUploads(bucket: fixture.bucket, prefix: "").isEmpty)
        try await fixture.checkBucket()
    }

    @Test("a cached file is hashed by identity: a second publish re-hashes nothing, a changed file is re-hashed")
    func cachedFilesAreHashedOnce() async throws {
        let fixture = try await Fixture("bhash")
        defer { fixture.cleanUp() }
        let cache = fixture.directory.appending("cache")
        var publisher = BucketPublisher(
            configuration: .init(templatePath: fixture.template, databaseURL: fixture.database.url, store: cache),
            s3: try SeaweedFS.client(), layout: fixture.layout)
        let hashed = Locked<[String]>([])
        publisher.hashed = { name in hashed.withLock { $0.append(name) } }

        // Given a first publish, which stored version 1 in the cache under its SHA-256
        let first = try await publisher.publish(changedTables: nil)
        let sha256 = try #require(first.sha256)
        let file = FileSnapshotStore(root: cache).objectURL(dataset: "bhash", sha256: sha256)
        // Its report prints under `bucket` as BucketTransfer's own JSON (`publish --json`), and takes part in `==`
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let transfer = try #require(first.bucket)
        #expect(transfer.uploaded == 3)
        #expect(
            String(decoding: try encoder.encode(first), as: UTF8.self).contains(
                "\"bucket\":" + String(decoding: try encoder.encode(transfer), as: UTF8.self)))
        var other = first
        other.bucket?.uploaded += 1
        #expect(other != first)

        // When it publishes again, the cached current file is checked by its identity, not hashed
        let second = try await publisher.publish(changedTables: nil)
        #expect(second.unchanged && second.bucket?.downloaded == 0)
        #expect(hashed.current.isEmpty)

        // When the cached file changes (same size, other bytes), the next publish hashes it, finds it wrong and
        // fetches the bucket's copy
        var bytes = try Data(contentsOf: file)
        bytes[bytes.count - 1] ^= 0xFF
        try bytes.write(to: file)
        let third = try await publisher.publish(changedTables: nil)
        #expect(hashed.current == ["\(sha256).sqlite"])
        #expect(third.unchanged && third.bucket?.downloaded == 1)
        #expect(try FileDigest.sha256Hex(of: file) == sha256)

        // Then the fetched copy is known by its identity: no more hashing
        _ = try await publisher.publish(changedTables: nil)
        #expect(hashed.current.count == 1)
    }

    @Test("bad credentials and a missing bucket: exit 1, naming the setting or the bucket, never the secret")
    func badCredentialsAndMissingBucket() async throws {
        let directory = try TemporaryDirectory("ferry-bucket-creds")
        defer { directory.remove() }
        let template = directory.appending("t.yml").path
        try "dataset: creds\ntables: [{name: t}]\n".write(toFile: template, atomically: true, encoding: .utf8)
        let (_, bucket) = try await SeaweedFS.freshBucket("bcreds")
        let endpoint = try SeaweedFS.variable("FERRY_TEST_S3_ENDPOINT")
        let secret = "not-the-secret-\(UUID().uuidString)"
        func run(_ store: String, secret: String) async throws -> ProcessResult {
            try await runFerry(
                [
                    "publish", "--config", template, "--database-url", "postgres://u@127.0.0.1:1/none", "--store",
                    store, "--s3-endpoint", endpoint, "--cache-dir", directory.appending("cache").path,
                ],
                environment: [
                    "AWS_ACCESS_KEY_ID": try SeaweedFS.variable("FERRY_TEST_S3_ACCESS_KEY"),
                    "AWS_SECRET_ACCESS_KEY": secret, "AWS_SESSION_TOKEN": "",
                ])
        }
        let wrong = try await run("s3://\(bucket)/p", secret: secret)
        #expect(wrong.status == 1)
        #expect(wrong.stderr.contains("AWS_SECRET_ACCESS_KEY"), "\(wrong.stderr)")
        #expect(!wrong.stderr.contains(secret) && !wrong.stdout.contains(secret))

        let missing = "ferry-missing-\(UUID().uuidString.prefix(8).lowercased())"
        let noBucket = try await run("s3://\(missing)/p", secret: try SeaweedFS.variable("FERRY_TEST_S3_SECRET_KEY"))
        #expect(noBucket.status == 1)
        #expect(noBucket.stderr.contains(missing), "\(noBucket.stderr)")

        // The bucket's options with a directory store are a usage error.
        let usage = try await runFerry([
            "publish", "--config", template, "--store", directory.url.path, "--object-grace", "0s",
        ])
        #expect(usage.status == 2 && usage.stderr.contains("--object-grace"), "\(usage.stderr)")
    }

    @Test("ferry schedule --store s3:// publishes into the bucket, and stops on SIGTERM")
    func scheduleIntoBucket() async throws {
        let fixture = try await Fixture("bsched")
        defer { fixture.cleanUp() }
        let process = Process()
        process.executableURL = TestPaths.ferryBinary
        process.arguments = [
            "schedule", "--every", "1h", "--config", fixture.template, "--database-url", fixture.database.url,
            "--store", fixture.store, "--s3-endpoint", try SeaweedFS.variable("FERRY_TEST_S3_ENDPOINT"),
            "--cache-dir", fixture.directory.appending("cache").path,
        ]
        var environment = ProcessInfo.processInfo.environment
        for (name, value) in try fixture.environment() { environment[name] = value }
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        var manifest: StoredManifest?
        let deadline = ContinuousClock.now + .seconds(60)
        while manifest == nil, ContinuousClock.now < deadline, process.isRunning {
            manifest = try? await fixture.manifest()
            if manifest == nil { try await Task.sleep(for: .milliseconds(200)) }
        }
        process.terminate()
        let status = try await offCooperativePool {
            process.waitUntilExit()
            return process.terminationStatus
        }
        #expect(manifest?.lastVersion == 1)
        #expect(status == 0)
        try await fixture.checkBucket()
    }
}
