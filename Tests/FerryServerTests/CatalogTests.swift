import FerryCore
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@testable import FerryServer

@Suite struct CatalogTests {
    @Test(
        "StoreChanges: a publish in the same process is served as soon as changed() returns, with no poll (a catalog that never polls)"
    )
    func storeChangesRefreshesAtOnce() async throws {
        let store = try TestStore()
        defer { store.remove() }
        _ = try store.publish()
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        // run() is never called: only an initial refresh and StoreChanges read the store.
        let catalog = SnapshotCatalog(
            store: FileSnapshotStore(root: store.store.root), pollInterval: .seconds(1), logger: logger)
        try await catalog.refresh()
        let changes = StoreChanges()
        await changes.changed()  // not attached yet: nothing happens, nothing fails
        changes.attach(catalog)
        #expect(catalog.manifests.map(\.version) == [1])

        let v2 = try store.publish()
        #expect(catalog.manifests.map(\.version) == [1], "nothing reads the store but changed()")
        await changes.changed()
        #expect(catalog.manifests.map(\.version) == [2])
        #expect(catalog.manifests.first?.sha256 == v2.sha256)

        // Refreshes side by side (the poll's and changed()) are one at a time and end on the newest manifest.
        let v3 = try store.publish()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 { group.addTask { await changes.changed() } }
        }
        #expect(catalog.manifests.map(\.version) == [3] && catalog.manifests.first?.sha256 == v3.sha256)
    }

    @Test func aVersionPublishedWhileServingIsPickedUpWithinASecond() async throws {
        // Given a server on the default poll interval, serving version 1
        let store = try TestStore()
        defer { store.remove() }
        let v1 = try store.publish()
        var configuration = store.configuration()
        configuration.pollInterval = ServerConfiguration(storePath: store.store.root).pollInterval

        try await store.withLiveServer(configuration) { client in
            let before = try await client.execute(uri: "/v1/datasets/trips/snapshot", method: .get)
            #expect(before.header("Ferry-Version") == "1")

            // When version 2 is published
            let v2 = try store.publish()
            let published = ContinuousClock.now

            // Then the server answers with it within about a second, with the bytes of version 2
            var seen: TestResponse?
            while ContinuousClock.now - published < .seconds(40) {
                let response = try await client.execute(uri: "/v1/datasets/trips/snapshot", method: .get)
                if response.header("Ferry-Version") == "2" {
                    seen = response
                    break
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            let elapsed = ContinuousClock.now - published
            let response = try #require(seen)
            // The poller runs at most 1 s behind; the bound allows for a busy 2-core machine running tests side by side
            #expect(elapsed < .seconds(30))
            #expect(sha256Hex(response.body) == v2.sha256)
            // The old ETag is no longer current, and the manifest moved too
            let old = try await client.execute(
                uri: "/v1/datasets/trips/snapshot", method: .get, headers: [.ifNoneMatch: "\"\(v1.sha256)\""])
            #expect(old.status == .ok)
            let manifest = try await client.execute(uri: "/v1/datasets/trips/manifest", method: .get)
            #expect(try Manifest.decode(manifest.bodyData).version == 2)

            // And a dataset published for the first time appears too
            try store.publish("parks")
            var parks = try await client.execute(uri: "/v1/datasets/parks/snapshot", method: .head)
            let deadline = ContinuousClock.now + .seconds(15)
            while parks.status != .ok, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
                parks = try await client.execute(uri: "/v1/datasets/parks/snapshot", method: .head)
            }
            #expect(parks.status == .ok)
        }
    }

    @Test func aDownloadOfAVersionDeletedByRetentionCompletesWithTheRightBytes() async throws {
        // Given a 24 MB version 1, served by a server that reads it in 64 KiB chunks
        let store = try TestStore()
        defer { store.remove() }
        let v1 = try store.publish(blobBytes: 24 << 20, keep: 1)
        let expected = v1.sha256
        let changes = StoreChanges()
        var configuration = store.configuration()
        configuration.dependencies.storeChanges = changes

        try await store.withLiveServer(configuration) { client in
            let port = try #require(client.port)
            let connection = try RawHTTPConnection(port: port)
            let (status, length, first) = try await offPool {
                try connection.send("GET /v1/datasets/trips/versions/1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
                let head = try connection.readHead()
                return (head.status, Int(head.headers["content-length"] ?? "") ?? -1, try connection.read(1 << 20))
            }
            #expect(status == 200)
            #expect(Int64(length) == v1.size)

            // When retention deletes version 1 (keep = 1) while the body is still being sent
            try store.publish(keep: 1)
            #expect(
                !FileManager.default.fileExists(atPath: store.store.objectURL(dataset: "trips", sha256: v1.sha256).path)
            )
            await changes.changed()  // the catalog has re-read the store and dropped version 1

            // Then the download finishes with exactly the bytes of version 1
            let digest = try await offPool {
                var hasher = FileHasher()
                first.withUnsafeBytes { hasher.update($0) }
                var received = first.count
                while received < length {
                    let part = try connection.read(min(1 << 20, length - received))
                    part.withUnsafeBytes { hasher.update($0) }
                    received += part.count
                }
                return hasher.finalizeHex()
            }
            #expect(digest == expected)

            // And a new request for version 1 is a 404 now
            let gone = try await client.execute(uri: "/v1/datasets/trips/versions/1", method: .get)
            #expect(gone.status == .notFound)
        }
    }

    @Test("a store in the legacy layout is served as it is, with the same manifest, bytes and ETags, until migrated")
    func legacyStoreIsServed() async throws {
        // Given a dataset written in the layout before content addressing (versions/N.sqlite, manifest.json a Manifest)
        let store = try TestStore()
        defer { store.remove() }
        let source = try store.publish("source", rows: 7)  // a real SQLite file to copy into the legacy layout
        let file = store.directory.appending("legacy.sqlite")
        try FileManager.default.copyItem(at: try store.store.snapshotURL(dataset: "source", version: 1), to: file)
        let legacy = try LegacyStore.commit(
            root: store.store.root, dataset: "old", version: 4, snapshot: file, tables: ["trips": 7], retained: [4])
        #expect(legacy.sha256 == source.sha256)

        let legacyBody = try legacy.jsonData()
        let changes = StoreChanges()
        var configuration = store.configuration()
        configuration.dependencies.storeChanges = changes
        try await store.withLiveServer(configuration) { client in
            // Then the manifest is the legacy one, byte for byte, and the snapshot and version URL serve its file
            let manifest = try await client.execute(uri: "/v1/datasets/old/manifest", method: .get)
            #expect(manifest.status == .ok && manifest.bodyData == legacyBody)
            let snapshot = try await client.execute(uri: "/v1/datasets/old/versions/4", method: .get)
            #expect(
                snapshot.status == .ok && sha256Hex(snapshot.body) == legacy.sha256
                    && snapshot.header("ETag") == "\"\(legacy.sha256)\"")

            // When a publisher migrates the store while the server runs
            let lock = try store.store.lock(dataset: "old", wait: false)
            try store.store.cleanLeftovers(dataset: "old")
            lock.unlock()
            await changes.changed()  // the catalog has re-read the migrated store

            // Then the answers are unchanged, now from objects/
            let after = try await client.execute(uri: "/v1/datasets/old/manifest", method: .get)
            #expect(after.status == .ok && after.bodyData == legacyBody)
            let again = try await client.execute(uri: "/v1/datasets/old/snapshot", method: .get)
            #expect(
                again.status == .ok && sha256Hex(again.body) == legacy.sha256 && again.header("Ferry-Version") == "4")
        }
    }
    @Test(
        "a versions/N store written by the old code itself (Tests/Fixtures/legacy-store) is served with its own manifest bytes"
    )
    func legacyFixtureIsServed() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let fixture = TestPaths.packageRoot.appendingPathComponent("Tests/Fixtures/legacy-store/trips")
        try FileManager.default.copyItem(at: fixture, to: store.store.directory(dataset: "trips"))
        let oldManifest = try Data(contentsOf: fixture.appendingPathComponent("manifest.json"))
        let records = try (1...2).map { version in
            try JSONDecoder().decode(
                VersionRecord.self, from: Data(contentsOf: fixture.appendingPathComponent("versions/\(version).json")))
        }

        try await store.withLiveServer { client in
            // The manifest is the file the old publisher wrote, byte for byte, and its ETag is the current checksum
            let manifest = try await client.execute(uri: "/v1/datasets/trips/manifest", method: .get)
            #expect(manifest.status == .ok && manifest.bodyData == oldManifest)
            // Each retained version URL serves the old file under its checksum
            for record in records {
                let version = try await client.execute(
                    uri: "/v1/datasets/trips/versions/\(record.version)", method: .get)
                #expect(version.status == .ok && sha256Hex(version.body) == record.sha256)
                #expect(version.header("ETag") == "\"\(record.sha256)\"")
            }
            let current = try await client.execute(uri: "/v1/datasets/trips/snapshot", method: .get)
            #expect(current.header("Ferry-Version") == "2" && sha256Hex(current.body) == records[1].sha256)
        }
    }
}
