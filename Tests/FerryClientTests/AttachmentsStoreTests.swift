import FerryCore
import FerryTestSupport
import Foundation
import Testing

@testable import FerryClient

/// The device's attachments on real files, without a server: the hashing copy, the upload queue, the outbox's
/// ordering rule and the on-demand cache.
@Suite struct AttachmentsStoreTests {
    static func store(_ dir: TemporaryDirectory) -> DeviceAttachments {
        DeviceAttachments(directory: ClientDirectory(dir.appending("client")))
    }

    @Test func theSameContentTwiceIsStoredAndQueuedOnce() async throws {
        let dir = try TemporaryDirectory("attach-twice")
        defer { dir.remove() }
        let store = Self.store(dir)
        let photo = dir.appending("photo.JPG")
        let bytes = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try bytes.write(to: photo)

        // When the same photo is attached twice, once as a file and once as bytes
        let first = try await store.add(fileAt: photo)
        let second = try await store.add(data: bytes, contentType: "image/jpeg")

        // Then one file holds it, named by its SHA-256, and one queue entry, typed from the extension
        #expect(first.sha256 == FileDigest.sha256Hex(bytes: Array(bytes)))
        #expect(first.queued && !second.queued && first.sha256 == second.sha256 && first.size == 300_000)
        #expect(try Data(contentsOf: store.url(for: first.sha256)) == bytes)
        let queued = try store.queued()
        #expect(queued.map(\.sha256) == [first.sha256])
        #expect(queued.first?.contentType == "image/jpeg" && queued.first?.size == 300_000)
        // And no temp file is left
        let names = try FileManager.default.contentsOfDirectory(atPath: store.root.path)
        #expect(names.sorted() == [first.sha256, "queue"])
    }

    @Test func aMissingOrUnreadableFileIsAClearErrorAndQueuesNothing() async throws {
        let dir = try TemporaryDirectory("attach-missing")
        defer { dir.remove() }
        let store = Self.store(dir)
        let missing = dir.appending("nope.jpg")
        let error = await #expect(throws: FerryError.self) { try await store.add(fileAt: missing) }
        #expect(error?.code == .io && error?.path == missing.path)
        let error2 = await #expect(throws: FerryError.self) { try await store.add(fileAt: dir.url) }
        #expect(error2?.path == dir.url.path)
        #expect(try store.queued().isEmpty)
        #expect(try store.held().isEmpty)
    }

    @Test func anEntryWithoutItsFileIsWhatACrashInsideAnAddLeaves() async throws {
        let dir = try TemporaryDirectory("attach-crash")
        defer { dir.remove() }
        let store = Self.store(dir)
        let added = try await store.add(data: Data("signature".utf8))
        // A crash between the queue entry and the rename leaves the entry alone: the file was never attached.
        try FileManager.default.removeItem(at: store.url(for: added.sha256))
        #expect(try store.queued().map(\.sha256) == [added.sha256])
        // Adding it again stores the file; the entry stays one.
        #expect(try await store.add(data: Data("signature".utf8)).queued)
        #expect(try store.queued().count == 1 && store.contains(added.sha256))
    }

    @Test func theCacheCapEvictsOnlyOnDemandAttachmentsLeastRecentlyUsedFirst() async throws {
        let dir = try TemporaryDirectory("attach-lru")
        defer { dir.remove() }
        let store = Self.store(dir)
        func stored(_ text: String) async throws -> String {
            let added = try await store.add(data: Data(String(repeating: text, count: 1000).utf8))
            try store.dequeue(added.sha256)  // as after its upload
            return added.sha256
        }
        let eager = try await stored("e")
        let (old, middle, recent) = (try await stored("a"), try await stored("b"), try await stored("c"))
        let queued = try await store.add(data: Data(String(repeating: "q", count: 1000).utf8)).sha256
        let unnamed = try await stored("u")
        let now = Date()
        store.touch(old, now: now.addingTimeInterval(-300))
        store.touch(middle, now: now.addingTimeInterval(-200))
        store.touch(recent, now: now.addingTimeInterval(-100))
        store.touch(eager, now: now.addingTimeInterval(-1000))
        let named: [String: FerryCore.Attachment.Download] = [
            eager: .eager, old: .onDemand, middle: .onDemand, recent: .onDemand, queued: .onDemand,
        ]

        // When the cache may hold two on-demand files of 1000 bytes
        let pruned = try store.prune(named: named, cacheBytes: 2000)

        // Then the least recently used on-demand one goes, the unnamed one is removed, eager and queued stay
        #expect(pruned.evicted == [old])
        #expect(pruned.unnamed == [unnamed])
        #expect(Set(try store.held().map(\.sha256)) == [eager, middle, recent, queued])

        // And a cap of zero keeps only eager and queued attachments
        #expect(Set(try store.prune(named: named, cacheBytes: 0).evicted) == [middle, recent])
        #expect(Set(try store.held().map(\.sha256)) == [eager, queued])
    }

    @Test func pushStopsAtTheFirstEditNamingAQueuedAttachment() throws {
        let dir = try TemporaryDirectory("attach-order")
        defer { dir.remove() }
        let db = try SQLiteConnection(path: dir.appending("outbox.db").path)
        try db.execute(
            "CREATE TABLE ferry_outbox(seq INTEGER PRIMARY KEY, id TEXT, tbl TEXT, op TEXT, key TEXT, vals TEXT, editedAt TEXT, baseUpdatedAt TEXT, sent INTEGER DEFAULT 0)"
        )
        let queued = String(repeating: "a", count: 64)
        let uploaded = String(repeating: "b", count: 64)
        for (seq, vals) in [
            (1, #"{"note":"x"}"#), (2, "{\"photo\":\"\(uploaded)\"}"), (3, "{\"photo\":\"\(queued)\"}"),
            (4, #"{"note":"y"}"#),
        ] {
            try db.run(
                "INSERT INTO ferry_outbox(seq, id, tbl, op, key, vals, editedAt) VALUES (?, ?, 'notes', 'update', '{}', ?, '')",
                [.integer(Int64(seq)), .text("c\(seq)"), .text(vals)])
        }
        #expect(try Outbox.firstSequence(naming: [queued], in: db) == 3)
        #expect(try Outbox.firstSequence(naming: [String(repeating: "c", count: 64)], in: db) == nil)
        #expect(try Outbox.firstSequence(naming: [], in: db) == nil)
    }
}
