import FerryClientNIO
import FerryCore
import FerryPostgres
import FerryPublisher
import FerryServer
import FerryTestSupport
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOFoundationEssentialsCompat
import Testing

@testable import FerryClient

/// Attachments end to end: real PostgreSQL, the real publisher, the real server with its attachment routes and the
/// changes endpoint, and real client directories.
@Suite struct AttachmentsServerTests {
    static let template = """
        dataset: notes
        schemaVersion: 1
        timestamps: { created: createdAt, updated: updatedAt }
        tables:
          - name: notes
            source: notes
            writable: true
            merge: newest-wins
            attachments:
              photo: {download: eager}
              scan: {download: on-demand}
        """
    static let schema = """
        CREATE TABLE notes (
          id          text PRIMARY KEY,
          body        text NOT NULL,
          photo       text,
          scan        text,
          "createdAt" timestamptz NOT NULL DEFAULT now(),
          "updatedAt" timestamptz NOT NULL DEFAULT now()
        );
        INSERT INTO notes (id, body, "createdAt", "updatedAt") VALUES
          ('n1', 'first', '2026-01-01 10:00:00+00', '2026-01-01 10:00:00+00'),
          ('n2', 'second', '2026-01-01 10:00:00+00', '2026-01-01 10:00:00+00');
        """

    struct World: Sendable {
        let database: TestDatabase
        let directory: TemporaryDirectory
        let server: URL
        var store: URL { directory.appending("store") }
        var templatePath: String { directory.appending("notes.yml").path }

        func publish() async throws -> Int {
            try await Publisher(
                configuration: .init(templatePath: templatePath, databaseURL: database.url, store: store), logger: .test
            ).publish().version
        }

        func scalar(_ sql: String) throws -> String? {
            try database.connect().query(sql, []).first?.first ?? nil
        }

        func client(_ name: String, transport: any HTTPTransport = URLSessionTransport.shared) async throws
            -> FerryClient
        {
            var configuration = FerryClient.Configuration(
                directory: directory.appending(name), serverURL: server, dataset: "notes")
            configuration.push.onOpen = false
            configuration.push.backoff = .milliseconds(10)
            return try await FerryClient.open(configuration: configuration.using(transport), logger: .test)
        }

        /// The attachment files the server's store holds.
        func serverHolds(_ sha256: String) -> Bool {
            FileManager.default.enumerator(atPath: store.path)?.contains { ($0 as? String)?.hasSuffix(sha256) == true }
                ?? false
        }
    }

    func withWorld(
        maxAttachmentBytes: Int64 = 64 << 20,
        _ body: @Sendable @escaping (World, @Sendable (Int) async throws -> Void) async throws -> Void
    ) async throws {
        let database = try TestDatabase.create("attach")
        let directory = try TemporaryDirectory("attach-e2e")
        defer {
            database.drop()
            directory.remove()
        }
        try database.connect().execute(Self.schema)
        try Self.template.write(to: directory.appending("notes.yml"), atomically: true, encoding: .utf8)
        let placeholder = World(database: database, directory: directory, server: URL(string: "http://127.0.0.1")!)
        #expect(try await placeholder.publish() == 1)
        var configuration = ServerConfiguration(storePath: placeholder.store, port: 0)
        configuration.pollInterval = .milliseconds(100)
        configuration.maxAttachmentBytes = maxAttachmentBytes
        configuration.database = .init(
            templatePaths: [URL(fileURLWithPath: placeholder.templatePath)], databaseURL: database.url)
        let app = try await buildApplication(configuration, logger: .test)
        try await app.test(.live) { client in
            let url = URL(string: "http://127.0.0.1:\(client.port!)")!
            let world = World(database: database, directory: directory, server: url)
            let waitForVersion: @Sendable (Int) async throws -> Void = { version in
                for _ in 0..<100 {
                    let response = try await client.execute(uri: "/v1/datasets/notes/manifest", method: .get)
                    if let manifest = try? Manifest.decode(Data(buffer: response.body)), manifest.version >= version {
                        return
                    }
                    try await Task.sleep(for: .milliseconds(50))
                }
                throw FerryError(.network, "the server did not pick up version \(version)")
            }
            try await body(world, waitForVersion)
        }
    }

    static func bytes(_ count: Int, seed: UInt8) -> Data {
        Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ Int(seed)) })
    }

    /// Eager downloads run a few at a time: every photo the server holds arrives, verified, and the one it lacks is
    /// reported missing without stopping the others.
    @Test func manyPhotosArriveTogetherAndOneTheServerLacksIsReportedMissing() async throws {
        try await withWorld { world, waitForVersion in
            // Given seven photos pushed by one device, each on a note of its own
            let device = try await world.client("device")
            #expect(try await device.checkForUpdates().outcome == .initialSync)
            var photos: [String] = []
            for index in 0..<7 {
                let photo = try await device.addAttachment(
                    data: Self.bytes(100_000 + index * 1_000, seed: UInt8(10 + index)), contentType: "image/jpeg")
                photos.append(photo.sha256)
                _ = try await device.execute(
                    "INSERT INTO notes (id, body, photo, createdAt, updatedAt) VALUES ('\(UUID().uuidString.lowercased())', 'photo \(index)', '\(photo.sha256)', '2026-01-02T10:00:00.000Z', '2026-01-02T10:00:00.000Z')"
                )
            }
            let pushed = try await device.push()
            #expect(pushed.attachments.uploaded == 7 && pushed.remaining == 0)
            // and a note naming a photo the server never got
            let absent = String(repeating: "ab", count: 32)
            try world.database.connect().execute(#"UPDATE notes SET photo = '\#(absent)' WHERE id = 'n1'"#)

            // When the version is published and another device syncs its attachments
            #expect(try await world.publish() == 2)
            try await waitForVersion(2)
            let other = try await world.client("other")
            #expect(try await other.checkForUpdates().outcome == .initialSync)
            let synced = try await other.syncAttachments()

            // Then the seven arrived, verified, and only the absent one is missing (tried again next time)
            #expect(synced.downloaded == 7 && synced.missing == [absent])
            #expect(synced.bytes == Int64((0..<7).reduce(0) { $0 + 100_000 + $1 * 1_000 }))
            for sha256 in photos {
                #expect(try FileDigest.sha256Hex(of: other.deviceAttachments.url(for: sha256)) == sha256)
            }
            #expect(!other.deviceAttachments.contains(absent))
        }
    }

    @Test func aPhotoAttachedOfflineArrivesBeforeItsRowAndAnotherDeviceGetsIt() async throws {
        try await withWorld(maxAttachmentBytes: 1 << 20) { world, waitForVersion in
            let device = try await world.client("device")
            #expect(try await device.checkForUpdates().outcome == .initialSync)

            // Given a photo and a scan attached offline, and a photo the server will refuse (over its limit)
            let photo = try await device.addAttachment(data: Self.bytes(300_000, seed: 1), contentType: "image/jpeg")
            let scan = try await device.addAttachment(
                data: Self.bytes(200_000, seed: 2), contentType: "application/pdf")
            let huge = try await device.addAttachment(data: Self.bytes(2 << 20, seed: 3), contentType: "image/jpeg")
            _ = try await device.execute(
                "UPDATE notes SET photo = '\(photo.sha256)', scan = '\(scan.sha256)' WHERE id = 'n1'")
            _ = try await device.execute("UPDATE notes SET photo = '\(huge.sha256)' WHERE id = 'n2'")
            #expect(!world.serverHolds(photo.sha256))

            // When the device pushes
            let pushed = try await device.push()

            // Then the photo and the scan were uploaded and their row reached PostgreSQL; the refused photo stays
            // queued, and so does the row that names it
            #expect(pushed.attachments.uploaded == 2 && pushed.attachments.bytes == 500_000)
            #expect(pushed.attachments.pending == 1 && pushed.sent == 1 && pushed.remaining == 1)
            #expect(world.serverHolds(photo.sha256) && world.serverHolds(scan.sha256))
            #expect(try world.scalar("SELECT photo FROM notes WHERE id = 'n1'") == photo.sha256)
            #expect(try world.scalar("SELECT photo FROM notes WHERE id = 'n2'") == nil)
            #expect(try await device.pendingAttachments().map(\.sha256) == [huge.sha256])

            // When the change is published and a second device fetches it
            #expect(try await world.publish() == 2)
            try await waitForVersion(2)
            let other = try await world.client("other")
            #expect(try await other.checkForUpdates().outcome == .initialSync)
            let synced = try await other.syncAttachments()

            // Then the eager photo is there, verified; the on-demand scan moved no byte
            #expect(synced.downloaded == 1 && synced.bytes == 300_000 && synced.missing.isEmpty)
            let store = other.deviceAttachments
            #expect(try FileDigest.sha256Hex(of: store.url(for: photo.sha256)) == photo.sha256)
            #expect(!store.contains(scan.sha256))

            // And asking for the scan downloads and verifies it
            let url = try await other.attachmentURL(for: scan.sha256)
            #expect(try FileDigest.sha256Hex(of: url) == scan.sha256)

            // When the row stops naming the photo, the next version removes it from the second device
            try world.database.connect().execute(
                #"UPDATE notes SET photo = NULL, "updatedAt" = now() WHERE id = 'n1'"#)
            #expect(try await world.publish() == 3)
            try await waitForVersion(3)
            #expect(try await other.checkForUpdates().outcome == .updateDownloaded)
            #expect(try await other.applyPendingUpdate().applied)
            let after = try await other.syncAttachments()
            #expect(after.removed == 1 && !store.contains(photo.sha256) && store.contains(scan.sha256))
            await other.close()
            await device.close()
        }
    }

    /// Counts the body bytes sent, and can break the link after some requests.
    struct CountingTransport: HTTPTransport {
        let inner: any HTTPTransport
        let sent = Locked<Int64>(0)
        let patchesLeft: Locked<Int>?
        var maxBodyBytes: Int64? { inner.maxBodyBytes }

        func send<Result: Sendable>(
            _ request: TransportRequest, _ handle: (TransportResponseHead, TransportResponseBody) async throws -> Result
        ) async throws -> Result {
            if request.method == "PATCH", let patchesLeft {
                let allowed = patchesLeft.withLock { left in
                    left -= 1
                    return left >= 0
                }
                guard allowed else { throw FerryError(.offline, "the link is cut (test)") }
            }
            sent.withLock { $0 += request.body?.length ?? 0 }
            return try await inner.send(request, handle)
        }
    }

    @Test func anUploadCutMidwayResumesFromTheServersOffset() async throws {
        try await withWorld { world, _ in
            let directory = world.directory.appending("device")
            let store = DeviceAttachments(directory: ClientDirectory(directory))
            let photo = try await store.add(data: Self.bytes(1 << 20, seed: 9), contentType: "image/jpeg")
            let chunks = try URLSessionTransport(maxBodyBytes: 128 << 10)

            // Given a link that breaks after 3 of the 8 chunks
            let cut = CountingTransport(inner: chunks, patchesLeft: Locked(3))
            var device = try await world.client("device", transport: cut)
            let first = try await device.push()
            #expect(first.attachments.pending == 1 && first.attachments.uploaded == 0)
            #expect(first.attachments.bytes == 3 * (128 << 10))
            #expect(try store.entry(photo.sha256)?.uploadURL != nil)
            await device.close()

            // When the device pushes again
            let counting = CountingTransport(inner: chunks, patchesLeft: nil)
            device = try await world.client("device", transport: counting)
            let second = try await device.push()

            // Then only the rest was sent, and the server holds the photo
            #expect(second.attachments.uploaded == 1 && second.attachments.pending == 0)
            #expect(counting.sent.withLock { $0 } == (1 << 20) - 3 * (128 << 10))
            #expect(world.serverHolds(photo.sha256))
            #expect(try store.queued().isEmpty)
            await device.close()
        }
    }

    @Test func anUploadHeldWholeButNotStoredIsStoredByTheNextPush() async throws {
        try await withWorld { world, _ in
            let directory = world.directory.appending("device")
            let store = DeviceAttachments(directory: ClientDirectory(directory))
            let photo = try await store.add(data: Self.bytes(256 << 10, seed: 4), contentType: "image/jpeg")
            // Given a server whose store fails once every byte arrived: its info file's name is taken by a directory
            let blocker = world.store.appendingPathComponent("notes/attachments/\(photo.sha256).json")
            try FileManager.default.createDirectory(at: blocker, withIntermediateDirectories: true)
            var device = try await world.client("device")
            let first = try await device.push()
            #expect(first.attachments.pending == 1 && first.attachments.uploaded == 0)
            #expect(!world.serverHolds(photo.sha256))
            #expect(try store.entry(photo.sha256)?.uploadURL != nil)
            await device.close()

            // When the store works again and the device pushes: the server holds every byte of the upload already
            try FileManager.default.removeItem(at: blocker)
            let counting = CountingTransport(inner: URLSessionTransport.shared, patchesLeft: nil)
            device = try await world.client("device", transport: counting)
            let second = try await device.push()

            // Then an empty PATCH at the upload's length made the server store it, and only then was it dequeued
            #expect(second.attachments.uploaded == 1 && second.attachments.pending == 0)
            #expect(counting.sent.withLock { $0 } == 0)
            #expect(world.serverHolds(photo.sha256))
            #expect(try store.queued().isEmpty)
            await device.close()
        }
    }

    @Test func killingPushMidUploadThenPushingAgainDeliversOnce() async throws {
        try await withWorld { world, _ in
            // Given a 40 MiB photo attached on a synced device, and the row that names it
            let device = try await world.client("device")
            #expect(try await device.checkForUpdates().outcome == .initialSync)
            let photo = try await device.addAttachment(data: Self.bytes(40 << 20, seed: 5), contentType: "image/jpeg")
            _ = try await device.execute("UPDATE notes SET photo = '\(photo.sha256)' WHERE id = 'n1'")
            await device.close()
            let directory = world.directory.appending("device")
            let store = DeviceAttachments(directory: ClientDirectory(directory))
            let push = [
                "push", "--server", world.server.absoluteString, "--dataset", "notes", "--dir", directory.path,
                "--json",
            ]

            // When `ferry push` is killed with -9 once its upload began (the server made it, the queue saved its URL)
            let sha256 = photo.sha256
            let killed = try await offCooperativePool {
                try ClientProcessTests.runAndKillBlocking(push, after: 0) {
                    // An entry being rewritten reads as not there yet: the next poll sees it.
                    ((try? store.entry(sha256)) ?? nil)?.uploadURL != nil
                }
            }
            #expect(killed, "push ended before it could be killed")
            #expect(try world.scalar("SELECT photo FROM notes WHERE id = 'n1'") == nil)

            // And pushed again
            let again = try await runFerry(push)
            #expect(again.status == 0, "\(again.stderr)")
            let object = try #require(try JSONSerialization.jsonObject(with: Data(again.stdout.utf8)) as? [String: Any])
            let attachments = try #require(object["attachments"] as? [String: Any])

            // Then the photo arrived once, the row after it, and nothing is left queued
            #expect(attachments["pending"] as? Int == 0)
            #expect(object["applied"] as? Int == 1)
            #expect(try world.scalar("SELECT photo FROM notes WHERE id = 'n1'") == photo.sha256)
            let held = FileManager.default.enumerator(atPath: world.store.path)?.compactMap { $0 as? String }
                .filter { $0.hasSuffix(photo.sha256) }
            #expect(held?.count == 1)
            #expect(try store.queued().isEmpty)
        }
    }

    /// A dequeue is not fsynced (one fsync less per photo): what a power loss can do is bring an entry back after its
    /// upload, and the next push must then take it off without sending a byte.
    @Test func anEntryBackAfterItsUploadIsTakenOffWithoutSendingAByte() async throws {
        try await withWorld { world, _ in
            // Given a photo pushed, whose queue entry comes back as a power loss could bring it back
            let store = DeviceAttachments(directory: ClientDirectory(world.directory.appending("device")))
            let photo = try await store.add(data: Self.bytes(200_000, seed: 4), contentType: "image/jpeg")
            let entry = try #require(try store.entry(photo.sha256))
            var device = try await world.client("device")
            #expect(try await device.push().attachments.uploaded == 1)
            #expect(try store.queued().isEmpty && world.serverHolds(photo.sha256))
            await device.close()
            try store.save(entry)

            // When the device pushes again
            let counting = CountingTransport(inner: URLSessionTransport.shared, patchesLeft: nil)
            device = try await world.client("device", transport: counting)
            let again = try await device.push()

            // Then the entry is gone and no body was sent
            #expect(again.attachments.pending == 0 && again.attachments.bytes == 0)
            #expect(counting.sent.withLock { $0 } == 0)
            #expect(try store.queued().isEmpty)
            await device.close()
        }
    }
}
