import FerryCore
import FerryStore
import Foundation
import Logging
import Testing

@testable import FerryServer

/// Retention of attachments: one that no retained version names is deleted once older than the grace; one a
/// version names, and a fresh one, stay; expired partial uploads go.
@Suite struct AttachmentRetentionTests {
    /// Publishes dataset `notes` whose `photos.image` column names `names` (an attachment column).
    static func publish(_ store: TestStore, naming names: [String]) throws {
        let files = store.store
        try DurableFile.makeDirectory(files.temporaryDirectory(dataset: "notes"))
        let url = files.temporaryDirectory(dataset: "notes").appendingPathComponent("\(UUID().uuidString).sqlite")
        let db = try SQLiteConnection(path: url.path)
        try db.execute("CREATE TABLE photos(id INTEGER PRIMARY KEY, caption TEXT, image TEXT)")
        for (i, name) in names.enumerated() {
            _ = try db.run(
                "INSERT INTO photos(id, caption, image) VALUES (?, 'x', ?)", [.integer(Int64(i)), .text(name)])
        }
        _ = try db.run("INSERT INTO photos(id, caption, image) VALUES (99, 'no photo', NULL)")
        try SnapshotMetadata(
            dataset: "notes", version: 1, schemaVersion: 1, createdAt: Timestamp.format(Date()),
            tables: [
                .init(
                    name: "photos", primaryKey: ["id"], columns: ["id", "caption", "image"], writable: true,
                    merge: .newestWins, createdColumn: nil, updatedColumn: nil, rows: names.count + 1)
            ],
            attachments: [AttachmentColumn(table: "photos", column: "image")]
        ).write(to: db)
        _ = try files.commit(
            dataset: "notes", version: try files.nextVersion(dataset: "notes"), snapshot: url, schemaVersion: 1,
            tables: ["photos": names.count + 1], dataDigest: String(repeating: "a", count: 64),
            createdAt: Timestamp.format(Date()), keep: 3)
    }

    /// Stores `bytes` as an attachment uploaded at `uploadedAt`; returns its name.
    static func add(_ attachments: FileAttachmentStore, _ bytes: Data, uploadedAt: Date) async throws -> String {
        let sha = sha256Hex(bytes)
        let temp = FileManager.default.temporaryDirectory.appendingPathComponent(UUID().uuidString)
        try bytes.write(to: temp)
        _ = try await attachments.add(
            dataset: "notes", sha256: sha, file: temp, contentType: "image/png", uploader: nil)
        var info = try #require(try await attachments.info(dataset: "notes", sha256: sha))
        info.uploadedAt = uploadedAt
        try info.encoded().write(to: attachments.infoURL(dataset: "notes", sha256: sha))
        return sha
    }

    @Test("retention deletes an unnamed attachment older than the grace, keeps a named one and a fresh one")
    func deletesOnlyUnnamedOldAttachments() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let attachments = FileAttachmentStore(root: store.store.root)
        let old = Date().addingTimeInterval(-8 * 86_400)
        let named = try await Self.add(attachments, AttachmentRouteTests.bytes(100, seed: 1), uploadedAt: old)
        let unnamed = try await Self.add(attachments, AttachmentRouteTests.bytes(100, seed: 2), uploadedAt: old)
        let fresh = try await Self.add(attachments, AttachmentRouteTests.bytes(100, seed: 3), uploadedAt: Date())
        try Self.publish(store, naming: [named])
        // An expired partial upload, and one still within the day.
        let uploads = PartialUploads(root: store.store.root.appendingPathComponent(".ferry-uploads"))
        let expired = try uploads.create(
            dataset: "notes",
            .init(length: 10, sha256: named, contentType: "image/png", uploader: nil, createdAt: Timestamp.format(old)))
        let current = try uploads.create(
            dataset: "notes",
            .init(
                length: 10, sha256: named, contentType: "image/png", uploader: nil, createdAt: Timestamp.format(Date()))
        )
        let catalog = SnapshotCatalog(
            store: store.store, pollInterval: .milliseconds(100), logger: Logger(label: "test"))
        try await catalog.refresh()
        let retention = AttachmentRetention(
            catalog: catalog, store: attachments, uploads: uploads, grace: .seconds(7 * 86_400),
            partialExpiry: .seconds(86_400), sweepInterval: .seconds(3_600), metrics: nil, logger: Logger(label: "test")
        )
        // When a sweep runs, then only the unnamed old attachment and the expired partial go.
        let swept = await retention.sweep(now: Date())
        #expect(swept.attachments == [unnamed])
        #expect(swept.partials == 1)
        #expect(try await attachments.info(dataset: "notes", sha256: named) != nil)
        #expect(try await attachments.info(dataset: "notes", sha256: fresh) != nil)
        #expect(try await attachments.info(dataset: "notes", sha256: unnamed) == nil)
        #expect(try uploads.state(dataset: "notes", id: expired) == nil)
        #expect(try uploads.state(dataset: "notes", id: current) != nil)
        // A second sweep finds nothing more.
        #expect(await retention.sweep(now: Date()) == .init())
    }

    @Test("AttachmentNames reads a checkpoint's attachment columns, ignoring NULLs")
    func namesOfACheckpoint() throws {
        let store = try TestStore()
        defer { store.remove() }
        let a = String(repeating: "a", count: 64)
        let b = String(repeating: "b", count: 64)
        try Self.publish(store, naming: [a, b, a])
        let manifest = try #require(try store.store.storedManifest(for: "notes"))
        let entry = try #require(manifest.entry(for: nil))
        #expect(try AttachmentNames.of(entry, in: manifest, store: store.store) == [a, b])
    }
}
