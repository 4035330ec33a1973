import FerryCore
import FerryGRDB
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import FerryClient

/// Attachments through FerryGRDB and through the `ferry` binary, against the real server of
/// ``AttachmentsServerTests``.
@Suite struct AttachmentsAppTests {
    func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test func anAppAddsAPhotoPushesItAndAnotherAppShowsIt() async throws {
        try await AttachmentsServerTests().withWorld { world, waitForVersion in
            func open(_ name: String) async throws -> FerryDatabase {
                var configuration = FerryClient.Configuration(
                    directory: world.directory.appending(name), serverURL: world.server, dataset: "notes")
                configuration.push.onOpen = false
                return try await FerryDatabase.open(configuration: configuration, applyMode: .automatic)
            }
            let ferry = try await open("app")
            try await ferry.checkForUpdates()

            // Given a photo and a scan added by the app, and the row that names them
            let photo = try await ferry.attachments.add(data: AttachmentsServerTests.bytes(120_000, seed: 4))
            let scan = try await ferry.attachments.add(data: AttachmentsServerTests.bytes(80_000, seed: 6))
            #expect(ferry.currentStatus.pendingAttachments == 2)
            #expect(ferry.currentStatus.pendingAttachmentBytes == 200_000)
            try await ferry.pool.write { db in
                try db.execute(
                    sql: "UPDATE notes SET photo = ?, scan = ? WHERE id = 'n2'", arguments: [photo, scan])
            }

            // When it pushes
            let pushed = try await ferry.push()

            // Then both went up before the row, and the status says nothing waits
            #expect(pushed.attachments.uploaded == 2 && pushed.sent == 1)
            #expect(ferry.currentStatus.pendingAttachments == 0)
            #expect(try world.scalar("SELECT scan FROM notes WHERE id = 'n2'") == scan)

            // When another app gets the next version
            #expect(try await world.publish() == 2)
            try await waitForVersion(2)
            let other = try await open("other")
            try await other.checkForUpdates()

            // Then the eager photo is on its device, the on-demand scan only once asked for
            #expect(other.client.deviceAttachments.contains(photo))
            #expect(!other.client.deviceAttachments.contains(scan))
            let url = try await other.attachments.url(for: scan)
            #expect(try FileDigest.sha256Hex(of: url) == scan)
            #expect(other.currentStatus.attachmentDownloads == 0)
            try await other.close()
            try await ferry.close()
        }
    }

    @Test func theCLIAttachesPushesFetchesAndFindsAttachments() async throws {
        try await AttachmentsServerTests().withWorld { world, waitForVersion in
            let server = ["--server", world.server.absoluteString, "--dataset", "notes"]
            let device = world.directory.appending("device").path
            let other = world.directory.appending("other").path
            #expect(try await runFerry(["fetch"] + server + ["--dir", device]).status == 0)

            // Given a photo and a scan attached with `ferry attach`, named by a row written with `ferry exec`
            let files = world.directory.appending("photo.jpg")
            try AttachmentsServerTests.bytes(50_000, seed: 8).write(to: files)
            let attached = try await runFerry(["attach", "--dir", device, files.path, "--json"])
            #expect(attached.status == 0, "\(attached.stderr)")
            let photo = try #require(try json(attached.stdout)["sha256"] as? String)
            #expect(try json(attached.stdout)["size"] as? Int == 50_000)
            let scanFile = world.directory.appending("scan.pdf")
            try AttachmentsServerTests.bytes(30_000, seed: 9).write(to: scanFile)
            let scan = try await runFerry(["attach", "--dir", device, scanFile.path]).stdout
                .trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(Attachment.isID(scan))
            let exec = try await runFerry([
                "exec", "--dir", device, "UPDATE notes SET photo = '\(photo)', scan = '\(scan)' WHERE id = 'n1'",
            ])
            #expect(exec.status == 0, "\(exec.stderr)")

            // When it pushes
            let push = try await runFerry(["push"] + server + ["--dir", device, "--json"])
            #expect(push.status == 0, "\(push.stderr)")
            let uploaded = try #require(try json(push.stdout)["attachments"] as? [String: Any])
            #expect(uploaded["uploaded"] as? Int == 2 && uploaded["bytes"] as? Int == 80_000)
            #expect(uploaded["pending"] as? Int == 0)

            // Then another device's fetch --apply brings the eager photo and no byte of the scan
            #expect(try await world.publish() == 2)
            try await waitForVersion(2)
            let fetch = try await runFerry(["fetch"] + server + ["--dir", other, "--apply", "--json"])
            #expect(fetch.status == 0, "\(fetch.stderr)")
            let synced = try #require(try json(fetch.stdout)["attachments"] as? [String: Any])
            #expect(synced["downloaded"] as? Int == 1 && synced["bytes"] as? Int == 50_000)
            let store = DeviceAttachments(directory: ClientDirectory(URL(fileURLWithPath: other)))
            #expect(store.contains(photo) && !store.contains(scan))

            // And `ferry attachment path` downloads the scan, verified, and prints where it is
            let path = try await runFerry(["attachment", "path", "--dir", other, scan] + server)
            #expect(path.status == 0, "\(path.stderr)")
            let printed = path.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(try FileDigest.sha256Hex(of: URL(fileURLWithPath: printed)) == scan)
            // Without a server it only finds what the device holds
            #expect(try await runFerry(["attachment", "path", "--dir", other, photo]).status == 0)
            let unknown = String(repeating: "0", count: 64)
            #expect(try await runFerry(["attachment", "path", "--dir", other, unknown]).status == 1)
        }
    }
}
