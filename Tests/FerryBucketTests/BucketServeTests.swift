import FerryCore
import FerryPostgres
import FerryS3
import FerryStore
import FerryTestSupport
import Foundation
import Testing

/// `ferry serve --store s3://…` against SeaweedFS, PostgreSQL and the real `ferry` CLI (issue 24 §3).
@Suite struct BucketServeTests {
    static func serveBucket(_ world: BucketWorld, extra: [String] = []) async throws -> BucketServeProcess {
        try await BucketServeProcess(
            ["--store", world.storeURL, "--s3-endpoint", try BucketWorld.endpoint, "--manifest-poll", "200ms"] + extra,
            environment: try BucketWorld.s3Environment())
    }

    static func servedVersion(_ server: BucketServeProcess) async throws -> Int? {
        let answer = try await httpGet(server.url, "/v1/datasets/trips/manifest")
        guard answer.status == 200 else { return nil }
        return try Manifest.decode(answer.body).version
    }

    @Test("served from a bucket exactly as from disk: fetch, manifest, versions, Range, 304; a new version by patch")
    func servesLikeDiskAndUpdatesByPatch() async throws {
        let world = try await BucketWorld.make("serve")
        defer { world.cleanUp() }
        try await world.publish()
        try await world.copyToBucket()
        let bucket = try await Self.serveBucket(world)
        defer { bucket.stop() }
        let disk = try await BucketServeProcess(["--store", world.storeDirectory.path])
        defer { disk.stop() }

        let manifest = try await httpGet(disk.url, "/v1/datasets/trips/manifest")
        let etag = try #require(manifest.headers["etag"])
        let version = try Manifest.decode(manifest.body).version
        #expect(version == 1)
        let requests: [(String, [String: String], Bool)] = [
            ("/v1/datasets", [:], false),
            ("/v1/datasets/trips/manifest", [:], false),
            ("/v1/datasets/trips/manifest", ["If-None-Match": etag], false),
            ("/v1/datasets/trips/versions/1", [:], false),
            ("/v1/datasets/trips/versions/1", ["Accept-Encoding": "gzip"], false),
            ("/v1/datasets/trips/versions/1", ["Range": "bytes=100-4195"], false),
            ("/v1/datasets/trips/versions/1", [:], true),
            ("/v1/datasets/trips/snapshot", [:], false),
        ]
        for (path, headers, head) in requests {
            let fromDisk = try await httpGet(disk.url, path, headers: headers, head: head)
            let fromBucket = try await httpGet(bucket.url, path, headers: headers, head: head)
            #expect(fromBucket.status == fromDisk.status, "\(path) \(headers)")
            #expect(fromBucket.headers == fromDisk.headers, "\(path) \(headers)")
            #expect(fromBucket.body == fromDisk.body, "\(path) \(headers)")
        }
        let notModified = try await httpGet(bucket.url, "/v1/datasets/trips/manifest", headers: ["If-None-Match": etag])
        #expect(notModified.status == 304)
        let ranged = try await httpGet(bucket.url, "/v1/datasets/trips/versions/1", headers: ["Range": "bytes=0-99"])
        #expect(ranged.status == 206 && ranged.body.count == 100)

        let device = world.directory.appendingPathComponent("device").path
        let first = try await runFerry([
            "fetch", "--server", bucket.url.absoluteString, "--dataset", "trips", "--dir", device, "--json", "--apply",
        ])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout.contains(#""path":"full""#), "\(first.stdout)")

        // Version 2: published into the directory as a step (its patch alone, docs/delta.md), copied into the bucket,
        // served within a few polls
        try world.sql(#"UPDATE trips SET bags = 7, "updatedAt" = now() WHERE name = 'Växjö-Kalmar'"#)
        try await world.publish(["--checkpoint-at", "1000%"])
        let stored = try FileSnapshotStore(root: world.storeDirectory).requireManifest("trips")
        #expect(stored.scopes[0].current.step != nil && !stored.scopes[0].current.isCheckpoint)
        let put = try await world.copyToBucket()
        try await waitUntil("the bucket server serving version 2") { try await Self.servedVersion(bucket) == 2 }
        try await waitUntil("the directory server serving version 2") { try await Self.servedVersion(disk) == 2 }
        // Each server built version 2 from the checkpoint and the step: the same file, the same answers
        for (path, headers) in [
            ("/v1/datasets/trips/versions/2", [String: String]()), ("/v1/datasets/trips/snapshot", [:]),
            ("/v1/datasets/trips/versions/2", ["Range": "bytes=10-99"]),
        ] {
            let fromDisk = try await httpGet(disk.url, path, headers: headers)
            let fromBucket = try await httpGet(bucket.url, path, headers: headers)
            #expect(fromBucket.status == fromDisk.status && fromBucket.body == fromDisk.body, "\(path) \(headers)")
            #expect(fromBucket.headers == fromDisk.headers, "\(path) \(headers)")
        }
        let built = try await httpGet(bucket.url, "/v1/datasets/trips/versions/2")
        #expect(FileDigest.sha256Hex(bytes: Array(built.body)) == stored.scopes[0].current.sha256)
        let delay = Date().timeIntervalSince(put)
        print("bucket serve: manifest PUT to served in \(Int(delay * 1000)) ms (debug build, poll 200ms)")
        #expect(delay < 10)
        let second = try await runFerry([
            "fetch", "--server", bucket.url.absoluteString, "--dataset", "trips", "--dir", device, "--json", "--apply",
        ])
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stdout.contains(#""path":"patch","patchFrom":1,"patchTo":2"#), "\(second.stdout)")
        let status = try await runFerry(["status", "--dir", device, "--json"])
        #expect(status.stdout.hasPrefix(#"{"state":"upToDate","version":2"#), "\(status.stdout)")
    }

    @Test(
        "the whole story on a bucket: serve --publish-every publishes version 1 into it in-process, a device fetches it, ferry publish --store s3:// makes version 2, the device updates by patch"
    )
    func publishServeFetchPatchThroughTheBucket() async throws {
        let world = try await BucketWorld.make("story")
        defer { world.cleanUp() }
        let server = try await Self.serveBucket(
            world,
            extra: [
                "--config", world.template, "--database-url", world.database.url, "--publish-every", "1h",
                "--cache-dir", world.directory.path,
            ])
        defer { server.stop() }
        try await waitUntil("the in-process publish of version 1, served from the bucket") {
            try await Self.servedVersion(server) == 1
        }
        let device = world.directory.appendingPathComponent("device").path
        let first = try await runFerry([
            "fetch", "--server", server.url.absoluteString, "--dataset", "trips", "--dir", device, "--json", "--apply",
        ])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout.contains(#""path":"full""#), "\(first.stdout)")

        // Another publisher (the CLI, a cache of its own) makes version 2 over the bucket's version 1.
        try world.sql(#"UPDATE trips SET bags = 9, "updatedAt" = now() WHERE name = 'Växjö-Kalmar'"#)
        var environment = try BucketWorld.s3Environment()
        environment["AWS_REGION"] = "us-east-1"
        let publish = try await runFerry(
            [
                "publish", "--config", world.template, "--database-url", world.database.url, "--store",
                world.storeURL, "--s3-endpoint", try BucketWorld.endpoint, "--cache-dir",
                world.directory.appendingPathComponent("publisher").path, "--json",
            ], environment: environment)
        #expect(publish.status == 0, "\(publish.stderr)")
        #expect(publish.stdout.contains(#""version":2"#), "\(publish.stdout)")
        try await waitUntil("the bucket server serving version 2") { try await Self.servedVersion(server) == 2 }
        let second = try await runFerry([
            "fetch", "--server", server.url.absoluteString, "--dataset", "trips", "--dir", device, "--json", "--apply",
        ])
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stdout.contains(#""path":"patch","patchFrom":1,"patchTo":2"#), "\(second.stdout)")
        // The in-process publisher's cache lives in --cache-dir while the server runs and goes with it.
        let caches = try FileManager.default.contentsOfDirectory(atPath: world.directory.path)
        #expect(caches.contains { $0.hasPrefix("ferry-publisher-cache-") }, "\(caches)")
        server.stop()
        let after = try FileManager.default.contentsOfDirectory(atPath: world.directory.path)
        #expect(
            !after.contains { $0.hasPrefix("ferry-publisher-cache-") || $0.hasPrefix("ferry-bucket-cache-") },
            "\(after)")
    }

    @Test("a manifest naming an object whose bytes fail verification is not served; the previous version is")
    func corruptObjectIsNotExposed() async throws {
        let world = try await BucketWorld.make("corrupt")
        defer { world.cleanUp() }
        try await world.publish()
        try await world.copyToBucket()
        let server = try await Self.serveBucket(world)
        defer { server.stop() }
        #expect(try await Self.servedVersion(server) == 1)

        // Bytes under a name that is the SHA-256 of other bytes, then a manifest whose version 2 is that object.
        let claimed = Data("the bytes the name promises".utf8)
        let sha = FileDigest.sha256Hex(bytes: [UInt8](claimed))
        let key = "\(world.prefix)trips/objects/\(sha).sqlite"
        let wrong = Data("other bytes of the same length!!!".utf8)
        try await world.s3.put(bucket: world.bucket, key: key, body: wrong)
        try await world.s3.put(
            bucket: world.bucket, key: "\(world.prefix)trips/objects/\(sha).sqlite.gz", body: wrong)
        let data = try Data(
            contentsOf: world.storeDirectory.appendingPathComponent("trips").appendingPathComponent("manifest.json"))
        var manifest = try StoredManifest.decode(data)
        var record = manifest.scopes[0].current
        record.version = 2
        record.sha256 = sha
        record.size = Int64(wrong.count)
        record.gzipSize = Int64(wrong.count)
        record.patches = nil
        manifest.scopes[0].retained.append(record)
        manifest.lastVersion = 2
        try await world.s3.put(
            bucket: world.bucket, key: "\(world.prefix)trips/manifest.json", body: manifest.jsonData())

        try await server.waitForLog(key)
        #expect(server.log.contains("SHA-256"), "\(server.log)")
        #expect(try await Self.servedVersion(server) == 1)
        #expect(try await httpGet(server.url, "/v1/datasets/trips/versions/1").status == 200)
        #expect(try await httpGet(server.url, "/v1/datasets/trips/versions/2").status == 404)
    }

    @Test("a wrong secret and an unknown bucket stop ferry serve at start with exit 1, naming the setting")
    func badCredentialsAndUnknownBucketExitOne() async throws {
        let world = try await BucketWorld.make("creds")
        defer { world.cleanUp() }
        let secret = "not-the-secret-\(UUID().uuidString)"
        let wrong = try await runFerry(
            ["serve", "--store", world.storeURL, "--s3-endpoint", try BucketWorld.endpoint, "--port", "0"],
            environment: try BucketWorld.s3Environment(secret: secret))
        #expect(wrong.status == 1)
        #expect(wrong.stderr.contains("AWS_SECRET_ACCESS_KEY"), "\(wrong.stderr)")
        #expect(!wrong.stderr.contains(secret) && !wrong.stdout.contains(secret))
        #expect(!wrong.stdout.contains("listening"))

        let missing = "ferry-missing-\(UUID().uuidString.prefix(8).lowercased())"
        let unknown = try await runFerry(
            ["serve", "--store", "s3://\(missing)/p", "--s3-endpoint", try BucketWorld.endpoint, "--port", "0"],
            environment: try BucketWorld.s3Environment())
        #expect(unknown.status == 1)
        #expect(unknown.stderr.contains(missing), "\(unknown.stderr)")

        // Bucket-only options with a directory store are usage errors.
        let directoryWithPoll = try await runFerry([
            "serve", "--store", world.storeDirectory.path, "--manifest-poll", "1s",
        ])
        #expect(directoryWithPoll.status == 2 && directoryWithPoll.stderr.contains("--manifest-poll"))
    }

    @Test("a bucket deleted mid-run: the server keeps serving the last good state; its cache goes when it stops")
    func bucketDeletedMidRun() async throws {
        let world = try await BucketWorld.make("gone")
        defer { world.cleanUp() }
        try await world.publish()
        try await world.copyToBucket()
        let cache = world.directory.appendingPathComponent("cache", isDirectory: true)
        try FileManager.default.createDirectory(at: cache, withIntermediateDirectories: true)
        let server = try await Self.serveBucket(world, extra: ["--cache-dir", cache.path])
        defer { server.stop() }
        let before = try await httpGet(server.url, "/v1/datasets/trips/versions/1")
        #expect(before.status == 200)
        let made = try FileManager.default.contentsOfDirectory(atPath: cache.path)
        #expect(made.count == 1 && made[0].hasPrefix("ferry-bucket-cache-"), "\(made)")

        try await world.deleteBucket()
        try await server.waitForLog("cannot list")
        #expect(try await Self.servedVersion(server) == 1)
        let after = try await httpGet(server.url, "/v1/datasets/trips/versions/1")
        #expect(after.status == 200 && after.body == before.body)
        // The cache goes with the server.
        server.stop()
        #expect(try FileManager.default.contentsOfDirectory(atPath: cache.path).isEmpty)
    }

    @Test("the changes endpoint works on a bucket store: ferry push through it lands in PostgreSQL")
    func pushLandsInPostgres() async throws {
        let world = try await BucketWorld.make("push")
        defer { world.cleanUp() }
        try await world.publish()
        try await world.copyToBucket()
        let server = try await Self.serveBucket(
            world, extra: ["--config", world.template, "--database-url", world.database.url])
        defer { server.stop() }
        let device = world.directory.appendingPathComponent("device").path
        let common = ["--server", server.url.absoluteString, "--dataset", "trips", "--dir", device]
        let fetched = try await runFerry(["fetch"] + common + ["--apply"])
        #expect(fetched.status == 0, "\(fetched.stderr)")
        let edit = try await runFerry([
            "exec", "--dir", device, "UPDATE trips SET passengers = 6 WHERE name = 'Växjö-Kalmar'",
        ])
        #expect(edit.status == 0, "\(edit.stderr)")
        let pushed = try await runFerry(["push"] + common)
        #expect(pushed.status == 0, "\(pushed.stderr)")
        let rows = try world.database.connect().query("SELECT passengers FROM trips WHERE name = 'Växjö-Kalmar'")
        #expect(rows == [["6"]])
    }

    @Test(
        "--presign-objects: the object lookup names a presigned bucket URL of the object (its exact bytes, no credentials needed, a changed signature refused) and the object's own headers; without the flag no URL"
    )
    func presignedObjectURLs() async throws {
        let world = try await BucketWorld.make("presign")
        defer { world.cleanUp() }
        try await world.publish()
        try await world.copyToBucket()
        let presigning = try await Self.serveBucket(world, extra: ["--presign-objects"])
        defer { presigning.stop() }
        let plain = try await Self.serveBucket(world)
        defer { plain.stop() }

        let manifest = try Manifest.decode(try await httpGet(plain.url, "/v1/datasets/trips/manifest").body)
        for encoding in [[:], ["Accept-Encoding": "gzip"]] {
            let lookup = try await httpGet(presigning.url, "/v1/datasets/trips/versions/1/object", headers: encoding)
            #expect(lookup.status == 200, "\(encoding)")
            let object = try #require(lookup.headers["ferry-object"])
            #expect(object == manifest.sha256 + (encoding.isEmpty ? ".sqlite" : ".sqlite.gz"))
            // The object's own headers, as its object URL sends them.
            let served = try await httpGet(plain.url, "/v1/datasets/trips/objects/\(object)")
            #expect(lookup.headers["ferry-object-etag"] == served.headers["etag"])
            #expect(lookup.headers["ferry-object-cache-control"] == served.headers["cache-control"])
            #expect(lookup.headers["ferry-object-repr-digest"] == served.headers["repr-digest"])
            #expect(lookup.headers["ferry-object-etag"] != nil && lookup.headers["ferry-object-repr-digest"] != nil)

            let url = try #require(lookup.headers["ferry-object-url"])
            #expect(url.hasPrefix(try BucketWorld.endpoint), "\(url)")
            #expect(url.contains("X-Amz-Expires=3600") && url.contains("X-Amz-Signature="))
            #expect(!url.contains(try BucketWorld.s3Environment()["AWS_SECRET_ACCESS_KEY"] ?? "no secret"))
            // Fetched with nothing but the URL (curl, no credentials): the object's bytes, also by Range.
            let fromBucket = try await httpGet(try #require(URL(string: url)), "")
            #expect(fromBucket.status == 200, "\(url)")
            #expect(fromBucket.body == served.body)
            if encoding.isEmpty { #expect(FileDigest.sha256Hex(bytes: Array(fromBucket.body)) == manifest.sha256) }
            let ranged = try await httpGet(try #require(URL(string: url)), "", headers: ["Range": "bytes=10-109"])
            #expect(ranged.status == 206 && ranged.body == served.body[10..<110])
            // One changed character of the signature: the bucket refuses it.
            let forged = String(url.dropLast()) + (url.hasSuffix("0") ? "1" : "0")
            let refused = try await httpGet(try #require(URL(string: forged)), "")
            #expect(refused.status == 403, "\(refused.status)")

            let unsigned = try await httpGet(plain.url, "/v1/datasets/trips/versions/1/object", headers: encoding)
            #expect(unsigned.headers["ferry-object"] == object)
            #expect(unsigned.headers["ferry-object-url"] == nil)
            #expect(unsigned.headers["ferry-object-etag"] == lookup.headers["ferry-object-etag"])
        }
        let onDisk = try await runFerry([
            "serve", "--store", world.storeDirectory.path, "--port", "0", "--presign-objects",
        ])
        #expect(onDisk.status == 2, "\(onDisk.stderr)")
        #expect(onDisk.stderr.contains("--presign-objects needs a bucket store"), "\(onDisk.stderr)")
    }

    @Test("a scoped dataset from a bucket: its manifest, versions and objects need the scope's token, as from disk")
    func scopedObjectsNeedTheToken() async throws {
        let world = try await BucketWorld.make("scoped")
        defer { world.cleanUp() }
        let root = TestPaths.packageRoot
        try world.sql(
            try String(contentsOf: root.appendingPathComponent("templates/campgrounds.pg.sql"), encoding: .utf8))
        let template = root.appendingPathComponent("templates/campgrounds-tiered.yml").path
        let published = try await runFerry([
            "publish", "--config", template, "--database-url", world.database.url, "--store",
            world.storeDirectory.path,
        ])
        #expect(published.status == 0, "\(published.stderr)")
        try await world.copyToBucket()
        let database = ["--config", template, "--database-url", world.database.url]
        let bucket = try await Self.serveBucket(world, extra: database)
        defer { bucket.stop() }
        let disk = try await BucketServeProcess(["--store", world.storeDirectory.path] + database)
        defer { disk.stop() }

        let data = try Data(
            contentsOf: world.storeDirectory.appendingPathComponent("campgrounds-tiered")
                .appendingPathComponent("manifest.json"))
        let manifest = try StoredManifest.decode(data)
        let premium = try #require(manifest.entry(for: "2")?.current)
        let paths = [
            "/v1/datasets/campgrounds-tiered/manifest",
            "/v1/datasets/campgrounds-tiered/versions/\(premium.version)",
            "/v1/datasets/campgrounds-tiered/objects/\(premium.sha256).sqlite",
            "/v1/datasets/campgrounds-tiered/objects/\(premium.sha256).sqlite.gz",
        ]
        for path in paths {
            for token in [nil, "alice-token", "bob-token", "no-such-token"] {
                let headers = token.map { ["Authorization": "Bearer \($0)"] } ?? [:]
                let fromDisk = try await httpGet(disk.url, path, headers: headers)
                let fromBucket = try await httpGet(bucket.url, path, headers: headers)
                #expect(fromBucket.status == fromDisk.status, "\(path) \(token ?? "no token")")
                #expect(fromBucket.body == fromDisk.body, "\(path) \(token ?? "no token")")
                if token == nil || token == "no-such-token" {
                    #expect([401, 403].contains(fromBucket.status), "\(path) \(token ?? "no token")")
                }
            }
            let bob = try await httpGet(bucket.url, path, headers: ["Authorization": "Bearer bob-token"])
            #expect(bob.status == 200, "\(path)")
        }
    }
}
