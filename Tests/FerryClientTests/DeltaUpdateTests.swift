import FerryClientNIO
import FerryCore
import FerryPostgres
import FerryPublisher
import FerryServer
import FerryStore
import Foundation
import Logging
import Testing

@testable import FerryClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Delta updates end to end: real PostgreSQL with the trips template grown to 400 rows, the real publisher writing
/// patches, the real server, and real client directories. Every test ends with the published rows, or with the old
/// database and a clear reason.
@Suite(.serialized) struct DeltaUpdateTests {
    struct World: Sendable {
        let database: TestDatabase
        let directory: TemporaryDirectory
        let templatePath: String
        let keep: Int
        var store: URL { directory.appending("store") }
        var snapshots: FileSnapshotStore { FileSnapshotStore(root: store) }

        /// Publishes the next version. With a `keep` of its own, a world tests today's retention: every version a
        /// checkpoint and no history, so `keep` counts versions (docs/delta.md).
        @discardableResult
        func publish(template: String? = nil) async throws -> PublishResult {
            var configuration = Publisher.Configuration(
                templatePath: template ?? templatePath, databaseURL: database.url, store: store, keep: keep)
            if keep != 5 {
                configuration.checkpointAt = 0
                configuration.patchHorizon = .zero
            }
            return try await Publisher(configuration: configuration, logger: .test).publish()
        }

        func sql(_ text: String) throws {
            try database.connect().execute(text)
        }

        func manifest() throws -> Manifest {
            try #require(try snapshots.manifest(for: "trips"))
        }

        /// The manifest the server at `url` answers: for a version stored as a step, with the size of the gzip copy
        /// the server made (the store's record has none).
        func served(_ url: URL) async throws -> Manifest {
            try Manifest.decode(
                try await URLSession.shared.data(from: url.appendingPathComponent("v1/datasets/trips/manifest")).0)
        }

        func client(_ name: String, server: URL, transport: (any HTTPTransport)? = nil, usePatches: Bool = true)
            async throws -> FerryClient
        {
            var configuration = FerryClient.Configuration(
                directory: directory.appending(name), serverURL: server, dataset: "trips")
            configuration.download.usePatches = usePatches
            configuration.push.onOpen = false
            return try await FerryClient.open(
                configuration: configuration.using(transport ?? AsyncHTTPClientTransport()), logger: .test)
        }

        /// The published file of `manifest`'s version.
        func published(_ manifest: Manifest) throws -> URL {
            try snapshots.fileURL(dataset: "trips", sha256: manifest.sha256)
        }
    }

    func withWorld(
        keep: Int = 5,
        _ body: @Sendable @escaping (World, URL, @Sendable (Int) async throws -> Void) async throws -> Void
    ) async throws {
        let database = try TestDatabase.trips("delta", rows: 400)
        let directory = try TemporaryDirectory("delta-e2e")
        defer {
            database.drop()
            directory.remove()
        }
        let root = TestPaths.packageRoot
        let world = World(
            database: database, directory: directory,
            templatePath: root.appendingPathComponent("templates/trips.yml").path, keep: keep)
        #expect(try await world.publish().version == 1)
        try await withFerryServer(store: world.store) { url, wait in try await body(world, url, wait) }
    }

    /// The rows of every table of `file`, with `ferry_tables`' counts: what a device's database must equal.
    static func rows(_ file: URL) throws -> [[SQLiteValue]] {
        let db = try SQLiteConnection(path: file.path, mode: .readOnly)
        return try db.query("SELECT * FROM trips ORDER BY id")
            + db.query("SELECT name, rows FROM ferry_tables ORDER BY name")
    }

    /// Checks `client`'s live database holds exactly the published version `manifest`: rows, version and digest.
    static func expectHolds(
        _ client: FerryClient, _ manifest: Manifest, _ world: World, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let status = try await client.status()
        #expect(status.version == manifest.version, sourceLocation: sourceLocation)
        #expect(status.sha256 == manifest.sha256, sourceLocation: sourceLocation)
        #expect(
            try rows(client.directory.database) == rows(try world.published(manifest)), sourceLocation: sourceLocation)
        let db = try SQLiteConnection(path: client.directory.database.path, mode: .readOnly)
        #expect(
            try ContentDigest.compute(db, tables: ["trips"]).description == manifest.contentDigest,
            sourceLocation: sourceLocation)
        try db.checkIntegrity()
    }

    @Test(
        "updates, deletes, inserts and a mix each arrive as one patch, smaller than the gzip copy, with the published rows",
        arguments: TransportKind.allCases)
    func patchesAcrossVersions(_ kind: TransportKind) async throws {
        try await withWorld { world, url, wait in
            let client = try await world.client("device", server: url, transport: kind.shared)
            #expect(try await client.checkForUpdates().download?.path == .full)
            let changes = [
                #"UPDATE trips SET passengers = passengers + 1, "updatedAt" = now() WHERE id LIKE 'row-00_5'"#,
                "DELETE FROM trips WHERE id IN ('row-0100', 'row-0200', 'row-0300')",
                "INSERT INTO trips (id, name) SELECT 'new-' || i, 'New trip ' || i FROM generate_series(1, 7) AS i",
                #"UPDATE trips SET name = name || ' (moved)' WHERE id = 'row-0001'; DELETE FROM trips WHERE id = 'new-1'; INSERT INTO trips (id, name) VALUES ('new-8', 'Öland')"#,
            ]
            for (i, change) in changes.enumerated() {
                try world.sql(change)
                let version = try await world.publish().version
                #expect(version == i + 2)
                try await wait(version)
                let manifest = try world.manifest()
                let result = try await client.checkForUpdates()
                #expect(result.outcome == .updateDownloaded)
                #expect(
                    result.download?.path == .patch(from: version - 1, to: version),
                    "\(String(describing: result.check.patchFailure))")
                #expect(result.check.patchFailure == nil)
                #expect(result.bytesReceived == manifest.current.patch(from: version - 1)?.size)
                #expect(try await result.bytesReceived < world.served(url).gzipSize)
                #expect(try await client.status().path == .patch(from: version - 1, to: version))
                #expect(try await client.applyPendingUpdate().applied)
                try await Self.expectHolds(client, manifest, world)
            }
            await client.close()
        }
    }

    @Test("devices two and three versions behind download one patch each, straight to the latest version")
    func devicesBehind() async throws {
        try await withWorld { world, url, wait in
            let three = try await world.client("three", server: url)
            _ = try await three.checkForUpdates()
            try world.sql(#"UPDATE trips SET bags = bags + 1, "updatedAt" = now() WHERE id LIKE 'row-01__'"#)
            try await wait(try await world.publish().version)
            let two = try await world.client("two", server: url)
            _ = try await two.checkForUpdates()
            try world.sql("DELETE FROM trips WHERE id LIKE 'row-02__'")
            try await wait(try await world.publish().version)
            try world.sql("INSERT INTO trips (id, name) VALUES ('late', 'Late trip')")
            try await wait(try await world.publish().version)
            let latest = try world.manifest()
            #expect(latest.version == 4)

            for (client, from) in [(three, 1), (two, 2)] {
                let result = try await client.checkForUpdates()
                #expect(
                    result.download?.path == .patch(from: from, to: 4),
                    "\(String(describing: result.check.patchFailure))")
                #expect(try await client.applyPendingUpdate().applied)
                try await Self.expectHolds(client, latest, world)
                await client.close()
            }
        }
    }

    @Test("queued edits on rows the patch changes and on rows it does not are replayed on top of the new version")
    func pendingEdits() async throws {
        try await withWorld { world, url, wait in
            let client = try await world.client("device", server: url)
            _ = try await client.checkForUpdates()
            // Given two queued edits: row-0010, which the next version changes, and row-0020, which it does not
            _ = try await client.execute("UPDATE trips SET passengers = 99 WHERE id = 'row-0010'")
            _ = try await client.execute("UPDATE trips SET passengers = 77 WHERE id = 'row-0020'")
            try world.sql(
                #"UPDATE trips SET passengers = 5, name = 'Server name', "updatedAt" = now() WHERE id IN ('row-0010', 'row-0011')"#
            )
            try await wait(try await world.publish().version)
            let v2 = try world.manifest()

            // When the device updates by patch and applies
            let result = try await client.checkForUpdates()
            #expect(result.download?.path == .patch(from: 1, to: 2), "\(String(describing: result.check.patchFailure))")
            #expect(try await client.applyPendingUpdate().applied)

            // Then it holds version 2 with its two edits on top, still queued
            let status = try await client.status()
            #expect(status.version == 2 && status.outbox == 2)
            let rows = try await client.withDatabase { db in
                try db.query(
                    "SELECT id, name, passengers FROM trips WHERE id IN ('row-0010', 'row-0011', 'row-0020') ORDER BY id"
                )
            }
            #expect(
                rows == [
                    [.text("row-0010"), .text("Server name"), .integer(99)],
                    [.text("row-0011"), .text("Server name"), .integer(5)],
                    [.text("row-0020"), .text("Trip number 20"), .integer(77)],
                ])
            // And every other row is the published one
            let others = "SELECT * FROM trips WHERE id NOT IN ('row-0010', 'row-0020') ORDER BY id"
            let published = try SQLiteConnection(path: world.published(v2).path, mode: .readOnly).query(others)
            #expect(try await client.withDatabase { db in try db.query(others) } == published)
            await client.close()
        }
    }

    @Test(
        "a patch flipped or cut in transit is refused by its checksum, and the full download takes over",
        arguments: [Tamper.flip, .truncate], TransportKind.allCases)
    func tamperedPatch(_ tamper: Tamper, _ kind: TransportKind) async throws {
        try await withWorld { world, url, wait in
            let transport = TamperingTransport(tamper, inner: kind.shared)
            let client = try await world.client("device", server: url, transport: transport)
            _ = try await client.checkForUpdates()
            try world.sql(#"UPDATE trips SET bags = 9, "updatedAt" = now() WHERE id LIKE 'row-03__'"#)
            try await wait(try await world.publish().version)
            let v2 = try world.manifest()

            let result = try await client.checkForUpdates()
            #expect(transport.tampered.withLock { $0 } == 1)
            #expect(result.download?.path == .full)
            let reason = try #require(result.check.patchFailure)
            #expect(reason.contains(tamper == .flip ? "does not match its checksum" : "ended after"), "\(reason)")
            #expect(try await client.applyPendingUpdate().applied)
            try await Self.expectHolds(client, v2, world)
            await client.close()
        }
    }

    @Test("a device whose version has no patch any more (pruned) takes the full download")
    func versionNotHeld() async throws {
        try await withWorld(keep: 2) { world, url, wait in
            let client = try await world.client("device", server: url)
            _ = try await client.checkForUpdates()
            for i in 1...2 {
                try world.sql(#"UPDATE trips SET bags = bags + 1, "updatedAt" = now() WHERE id = 'row-000\#(i)'"#)
                try await wait(try await world.publish().version)
            }
            let v3 = try world.manifest()
            #expect(v3.current.patches?.map(\.from) == [2])
            let result = try await client.checkForUpdates()
            #expect(result.download?.path == .full && result.check.patchFailure == nil)
            #expect(try await client.applyPendingUpdate().applied)
            try await Self.expectHolds(client, v3, world)
            await client.close()
        }
    }

    @Test("a schema version bump writes no patch, and the device takes the full download")
    func schemaBump() async throws {
        try await withWorld { world, url, wait in
            let client = try await world.client("device", server: url)
            _ = try await client.checkForUpdates()
            let bumped = world.directory.appending("trips-v2.yml")
            let template = try String(contentsOfFile: world.templatePath, encoding: .utf8)
            try template.replacingOccurrences(of: "schemaVersion: 1", with: "schemaVersion: 2").write(
                to: bumped, atomically: true, encoding: .utf8)
            try world.sql(#"UPDATE trips SET bags = 1, "updatedAt" = now() WHERE id = 'row-0001'"#)
            try await wait(try await world.publish(template: bumped.path).version)
            let v2 = try world.manifest()
            #expect(v2.schemaVersion == 2 && v2.current.patches == nil)
            let result = try await client.checkForUpdates()
            #expect(result.download?.path == .full)
            #expect(try await client.applyPendingUpdate().applied)
            try await Self.expectHolds(client, v2, world)
            await client.close()
        }
    }

    @Test("--no-patch downloads the full version; fetch and status --json say which path was taken")
    func cliPathAndNoPatch() async throws {
        try await withWorld { world, url, wait in
            let patched = world.directory.appending("patched").path
            let full = world.directory.appending("full").path
            for dir in [patched, full] {
                let first = try await runFerry([
                    "fetch", "--server", url.absoluteString, "--dataset", "trips", "--dir", dir, "--json",
                ])
                #expect(first.status == 0, "\(first.stderr)")
                #expect(
                    first.stdout.contains(#""path":"full","patchFrom":null,"patchTo":null,"patchError":null,"#),
                    "\(first.stdout)")
            }
            try world.sql(#"UPDATE trips SET bags = 2, "updatedAt" = now() WHERE id = 'row-0002'"#)
            try await wait(try await world.publish().version)
            let v2 = try world.manifest()
            let patch = try #require(v2.current.patch(from: 1))

            let byPatch = try await runFerry([
                "fetch", "--server", url.absoluteString, "--dataset", "trips", "--dir", patched, "--json", "--apply",
            ])
            #expect(byPatch.status == 0, "\(byPatch.stderr)")
            #expect(byPatch.stdout.contains(#""bytesReceived":\#(patch.size),"#), "\(byPatch.stdout)")
            // The patch is measured against the published file (publishedBytes), not the device's copy of it.
            #expect(
                byPatch.stdout.hasSuffix(
                    #""path":"patch","patchFrom":1,"patchTo":2,"patchError":null,"publishedBytes":\#(v2.current.size),"ownRowsSettled":0,"attachments":{"bytes":0,"downloaded":0,"evicted":0,"missing":[],"removed":0}}"#
                        + "\n"), "\(byPatch.stdout)")
            let byFull = try await runFerry(
                [
                    "fetch", "--server", url.absoluteString, "--dataset", "trips", "--dir", full, "--json", "--apply",
                    "--no-patch",
                ])
            #expect(byFull.status == 0, "\(byFull.stderr)")
            // The whole current file (the server builds it on request: version 2 is stored as a step), more than the patch.
            let fullBytes = try #require(
                (try JSONSerialization.jsonObject(with: Data(byFull.stdout.utf8)) as? [String: Any])?["bytesReceived"]
                    as? Int)
            #expect(Int64(fullBytes) > patch.size, "\(byFull.stdout)")
            #expect(
                byFull.stdout.hasSuffix(
                    #""path":"full","patchFrom":null,"patchTo":null,"patchError":null,"publishedBytes":\#(v2.current.size),"ownRowsSettled":null,"attachments":{"bytes":0,"downloaded":0,"evicted":0,"missing":[],"removed":0}}"#
                        + "\n"), "\(byFull.stdout)")

            let status = try await runFerry(["status", "--dir", patched, "--json"])
            #expect(
                status.stdout.hasPrefix(#"{"state":"upToDate","version":2,"sha256":"\#(v2.sha256)""#),
                "\(status.stdout)")
            #expect(
                status.stdout.contains(
                    #""outbox":0,"path":"patch","patchFrom":1,"patchTo":2,"ownRowsSettled":0,"device":""#),
                "\(status.stdout)")
            let text = try await runFerry([
                "fetch", "--server", url.absoluteString, "--dataset", "trips", "--dir", patched,
            ])
            #expect(text.stdout.contains("already up to date"), "\(text.stdout)")
            #expect(
                try Self.rows(URL(fileURLWithPath: patched).appendingPathComponent("database.db"))
                    == Self.rows(world.published(v2)))
        }
    }

    @Test("a copy left by a process killed while applying a patch is removed on open, and the next fetch patches again")
    func leftoverOfAKilledApply() async throws {
        try await withWorld { world, url, wait in
            var client = try await world.client("device", server: url)
            _ = try await client.checkForUpdates()
            await client.close()
            try world.sql(#"UPDATE trips SET bags = 5, "updatedAt" = now() WHERE id = 'row-0005'"#)
            try await wait(try await world.publish().version)
            // Given what a kill -9 inside the patch's transaction leaves: a half-written copy and its journal
            let directory = ClientDirectory(world.directory.appending("device"))
            try Data("half a database".utf8).write(to: directory.patched)
            try Data("a journal".utf8).write(to: URL(fileURLWithPath: directory.patched.path + "-journal"))

            client = try await world.client("device", server: url)
            #expect(!FileManager.default.fileExists(atPath: directory.patched.path))
            #expect(!FileManager.default.fileExists(atPath: directory.patched.path + "-journal"))
            #expect(try await client.status().version == 1)
            let result = try await client.checkForUpdates()
            #expect(result.download?.path == .patch(from: 1, to: 2))
            #expect(!FileManager.default.fileExists(atPath: directory.patched.path))
            #expect(try await client.applyPendingUpdate().applied)
            try await Self.expectHolds(client, try world.manifest(), world)
            await client.close()
        }
    }

    @Test("a patch is only taken from the very file it was made for: version, checksum, schema and size")
    func choosingAPatch() throws {
        let base = SnapshotDownloader.PatchBase(
            file: URL(fileURLWithPath: "/x/database.db"),
            info: SnapshotInfo(
                sha256: String(repeating: "a", count: 64), version: 3, schemaVersion: 1, dataset: "trips"))
        let patch = PatchRef(
            from: 3, to: 5, size: 100, sha256: String(repeating: "c", count: 64), base: base.info.sha256)
        func manifest(_ patches: [PatchRef]?, schemaVersion: Int = 1, gzipSize: Int64 = 1000) -> Manifest {
            Manifest(
                dataset: "trips",
                current: PublishedVersion(
                    version: 5, sha256: String(repeating: "e", count: 64), size: 5000, gzipSize: gzipSize,
                    createdAt: "2026-11-23T00:00:00.000Z",
                    schemaVersion: schemaVersion, tables: ["trips": 1], patches: patches),
                versions: [3, 4, 5])
        }
        #expect(SnapshotDownloader.choosePatch(manifest([patch]), base: base, dataset: "trips", accepted: nil) == patch)
        // Another scope's version 3 (a grant changed the device's scope): its checksum is not the patch's base
        var otherScope = patch
        otherScope.base = String(repeating: "b", count: 64)
        #expect(
            SnapshotDownloader.choosePatch(manifest([otherScope]), base: base, dataset: "trips", accepted: nil) == nil)
        // A record from before `base` existed
        var unnamed = patch
        unnamed.base = nil
        #expect(SnapshotDownloader.choosePatch(manifest([unnamed]), base: base, dataset: "trips", accepted: nil) == nil)
        #expect(
            SnapshotDownloader.choosePatch(
                manifest([patch], schemaVersion: 2), base: base, dataset: "trips", accepted: nil) == nil)
        #expect(SnapshotDownloader.choosePatch(manifest([patch]), base: base, dataset: "trips", accepted: [2]) == nil)
        #expect(
            SnapshotDownloader.choosePatch(
                manifest([patch], gzipSize: 100), base: base, dataset: "trips", accepted: nil) == nil)
        #expect(SnapshotDownloader.choosePatch(manifest(nil), base: base, dataset: "trips", accepted: nil) == nil)
        #expect(SnapshotDownloader.choosePatch(manifest([patch]), base: nil, dataset: "trips", accepted: nil) == nil)
    }
}

enum Tamper: Sendable, CustomTestStringConvertible {
    case flip, truncate
    var testDescription: String { self == .flip ? "a flipped byte" : "a cut body" }
}

/// The network between device and server, as a broken proxy: the first patch body that crosses it gets one byte
/// flipped, or loses its second half. Everything else passes untouched.
final class TamperingTransport: HTTPTransport {
    let inner: any HTTPTransport
    let tamper: Tamper
    let tampered = Locked(0)

    init(_ tamper: Tamper, inner: any HTTPTransport) {
        self.tamper = tamper
        self.inner = inner
    }

    func send<Result: Sendable>(
        _ request: TransportRequest, _ handle: (TransportResponseHead, TransportResponseBody) async throws -> Result
    ) async throws -> Result {
        guard request.url.path.contains("/patches/"), tampered.withLock({ $0 }) == 0 else {
            return try await inner.send(request, handle)
        }
        return try await inner.send(request) { head, body in
            var data = Data()
            for try await chunk in body { data.append(chunk) }
            tampered.withLock { $0 += 1 }
            switch tamper {
            case .flip: data[data.count / 2] ^= 0x40
            case .truncate: data = data.prefix(data.count / 2)
            }
            var sent = false
            return try await handle(
                head,
                TransportResponseBody { () -> Data? in
                    defer { sent = true }
                    return sent ? nil : data
                })
        }
    }
}
