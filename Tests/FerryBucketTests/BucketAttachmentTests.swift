import FerryBucket
import FerryCore
import FerryPostgres
import FerryS3
import FerryStore
import FerryTestSupport
import Foundation
import Testing

/// Attachments in a bucket store: the bytes and their info under `DATASET/attachments/`, served by any replica
/// from its own verified cache.
@Suite("Attachments in a bucket")
struct BucketAttachmentTests {
    static func sha256(_ data: Data) -> String {
        FileDigest.sha256Hex(bytes: [UInt8](data))
    }

    static func tempFile(_ data: Data, in folder: URL) throws -> URL {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let url = folder.appendingPathComponent(UUID().uuidString)
        try data.write(to: url)
        return url
    }

    @Test("added once, read by a replica with an empty cache (verified), listed, merged uploaders, deleted")
    func roundTrip() async throws {
        let world = try await BucketWorld.make("attach-store")
        defer { world.cleanUp() }
        let layout = BucketLayout(location: try S3Location(parsing: world.storeURL))
        let one = BucketAttachmentStore(
            s3: world.s3, layout: layout, cache: world.directory.appendingPathComponent("a"))
        let two = BucketAttachmentStore(
            s3: world.s3, layout: layout, cache: world.directory.appendingPathComponent("b"))
        let photo = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let name = Self.sha256(photo)
        let scratch = world.directory.appendingPathComponent("scratch")

        let (info, created) = try await one.add(
            dataset: "notes", sha256: name, file: try Self.tempFile(photo, in: scratch), contentType: "image/jpeg",
            uploader: "token-a")
        #expect(created && info.size == Int64(photo.count) && info.uploaders == ["token-a"])
        let keys = try await world.s3.list(bucket: world.bucket, prefix: "\(world.prefix)notes/attachments/").map(\.key)
        #expect(
            keys.sorted() == [
                "\(world.prefix)notes/attachments/\(name)", "\(world.prefix)notes/attachments/\(name).json",
            ])

        // Another replica: nothing cached, so the bytes come from the bucket, hashed on the way.
        let url = try #require(try await two.file(dataset: "notes", sha256: name))
        #expect(try Data(contentsOf: url) == photo)
        #expect(try await two.info(dataset: "notes", sha256: name)?.contentType == "image/jpeg")

        // The same bytes again, from another token: held already, its uploader merged.
        let again = try await two.add(
            dataset: "notes", sha256: name, file: try Self.tempFile(photo, in: scratch), contentType: "image/jpeg",
            uploader: "token-b")
        #expect(!again.created && again.info.uploaders == ["token-a", "token-b"])
        #expect(try await one.list(dataset: "notes").map(\.sha256) == [name])
        #expect(try await one.info(dataset: "notes", sha256: name)?.uploaders == ["token-a", "token-b"])

        try await one.delete(dataset: "notes", sha256: name)
        #expect(try await two.info(dataset: "notes", sha256: name) == nil)
        #expect(try await one.file(dataset: "notes", sha256: name) == nil)
        #expect(try await world.s3.list(bucket: world.bucket, prefix: "\(world.prefix)notes/attachments/").isEmpty)
        try await world.deleteBucket()
    }

    @Test("bytes in the bucket that are not what their name says are never cached or served")
    func forgedBytes() async throws {
        let world = try await BucketWorld.make("attach-forged")
        defer { world.cleanUp() }
        let layout = BucketLayout(location: try S3Location(parsing: world.storeURL))
        let store = BucketAttachmentStore(
            s3: world.s3, layout: layout, cache: world.directory.appendingPathComponent("c"))
        let name = Self.sha256(Data("the real photo".utf8))
        let info = AttachmentInfo(sha256: name, size: 6, contentType: "image/jpeg", uploadedAt: Date())
        try await world.s3.put(
            bucket: world.bucket, key: store.key(dataset: "notes", name: name), body: Data("forged".utf8))
        try await world.s3.put(
            bucket: world.bucket, key: store.key(dataset: "notes", name: name + ".json"), body: try info.encoded())
        let error = await #expect(throws: FerryError.self) { try await store.file(dataset: "notes", sha256: name) }
        #expect(error?.code == .verification)
        let cached = world.directory.appendingPathComponent("c/notes/attachments/\(name)")
        #expect(!FileManager.default.fileExists(atPath: cached.path))
        try await world.deleteBucket()
    }

    @Test("ferry serve on a bucket: a PUT lands in the bucket, and another replica serves the same bytes")
    func servedByReplicas() async throws {
        let world = try await BucketWorld.make("attach-serve")
        defer { world.cleanUp() }
        try await world.publish()
        try await world.copyToBucket()
        let first = try await BucketServeTests.serveBucket(world)
        defer { first.stop() }
        let second = try await BucketServeTests.serveBucket(world)
        defer { second.stop() }
        let photo = Data((0..<2_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) })
        let name = Self.sha256(photo)
        let file = try Self.tempFile(photo, in: world.directory.appendingPathComponent("upload"))
        let put = try await runProcess(
            URL(fileURLWithPath: "/usr/bin/curl"),
            [
                "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-T", file.path, "-H", "Content-Type: image/png",
                first.url.absoluteString + "/v1/datasets/trips/attachments/\(name)",
            ])
        #expect(put.stdout == "201", "\(put.stderr)")
        let keys = try await world.s3.list(bucket: world.bucket, prefix: "\(world.prefix)trips/attachments/").map(\.key)
        #expect(keys.contains("\(world.prefix)trips/attachments/\(name)"))

        let out = world.directory.appendingPathComponent("got")
        let got = try await runProcess(
            URL(fileURLWithPath: "/usr/bin/curl"),
            [
                "-sS", "-D", "-", "-o", out.path, second.url.absoluteString + "/v1/datasets/trips/attachments/\(name)",
            ])
        #expect(got.stdout.contains(" 200"), "\(got.stdout)")
        #expect(got.stdout.lowercased().contains("etag: \"\(name)\""))
        #expect(got.stdout.lowercased().contains("content-type: image/png"))
        #expect(try Data(contentsOf: out) == photo)
        try await world.deleteBucket()
    }

    @Test("through a bucket store: a photo attached offline reaches the bucket and PostgreSQL, then another device")
    func deviceToDevice() async throws {
        let world = try await BucketWorld.make("attach-devices")
        defer { world.cleanUp() }
        let root = TestPaths.packageRoot
        try world.sql(try String(contentsOf: root.appendingPathComponent("templates/notes.pg.sql"), encoding: .utf8))
        let template = root.appendingPathComponent("templates/notes.yml").path
        let publish = ["publish", "--config", template, "--database-url", world.database.url, "--store"]
        let first = try await runFerry(publish + [world.storeDirectory.path])
        #expect(first.status == 0, "\(first.stderr)")
        try await world.copyToBucket()
        let server = try await BucketServeTests.serveBucket(
            world, extra: ["--config", template, "--database-url", world.database.url])
        defer { server.stop() }
        let common = ["--server", server.url.absoluteString, "--dataset", "notes"]
        let inspector = world.directory.appendingPathComponent("inspector").path
        let office = world.directory.appendingPathComponent("office").path
        #expect(try await runFerry(["fetch", "--dir", inspector, "--apply"] + common).status == 0)

        // Offline: the photo is attached and the note names it.
        let photo = Data((0..<1_500_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 11) })
        let file = try Self.tempFile(photo, in: world.directory.appendingPathComponent("camera"))
        let attached = try await runFerry(["attach", "--dir", inspector, file.path])
        #expect(attached.status == 0, "\(attached.stderr)")
        let name = attached.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(name == Self.sha256(photo))
        let note = "b3c1d2e0-0000-4000-8000-000000000001"
        let edit = try await runFerry([
            "exec", "--dir", inspector, "UPDATE notes SET photo = '\(name)' WHERE id = '\(note)'",
        ])
        #expect(edit.status == 0, "\(edit.stderr)")
        let pushed = try await runFerry(["push", "--dir", inspector] + common)
        #expect(pushed.status == 0, "\(pushed.stderr)")
        #expect(try world.database.connect().query("SELECT photo FROM notes WHERE id = '\(note)'") == [[name]])
        let keys = try await world.s3.list(bucket: world.bucket, prefix: "\(world.prefix)notes/attachments/").map(\.key)
        #expect(keys.contains("\(world.prefix)notes/attachments/\(name)"))

        // The next version names it; the office's device gets it with the rows (eager), verified.
        let second = try await runFerry(publish + [world.storeDirectory.path])
        #expect(second.status == 0, "\(second.stderr)")
        try await world.copyToBucket()
        let deadline = Date().addingTimeInterval(30)
        var fetched: ProcessResult?
        while Date() < deadline {
            let result = try await runFerry(["fetch", "--dir", office, "--apply", "--json"] + common)
            fetched = result
            if result.status == 0, result.stdout.contains("\"version\":2") { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(
            fetched?.stdout.contains("\"downloaded\":1") == true, "\(fetched?.stdout ?? "") \(fetched?.stderr ?? "")")
        let local = URL(fileURLWithPath: office).appendingPathComponent(".ferry/attachments/\(name)")
        #expect(try Data(contentsOf: local) == photo)
        try await world.deleteBucket()
    }
}
