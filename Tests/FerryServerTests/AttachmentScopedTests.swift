import FerryCore
import FerryPostgres
import FerryPublisher
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import FerryServer

/// The read rules of attachments on a scoped dataset: the sample campgrounds per tier (alice tier 0, bob tier 2),
/// whose photos name attachments. A token reads an attachment its scope's rows name, or one it uploaded; any other
/// is 404 to it; without a token, 401.
@Suite struct AttachmentScopedTests {
    static let alice: HTTPFields = [.authorization: "Bearer alice-token"]
    static let bob: HTTPFields = [.authorization: "Bearer bob-token"]

    @Test(
        "scoped reads: the scope whose rows name it and its uploader read it; another scope's token 404; no token 401")
    func scopedReadRules() async throws {
        let world = try ScopedServerTests.World.make("attach-scoped")
        defer { world.close() }
        let free = AttachmentRouteTests.bytes(3000, seed: 1)  // a photo of a tier-0 campground
        let premium = AttachmentRouteTests.bytes(3000, seed: 2)  // a photo of a tier-2 campground
        let own = AttachmentRouteTests.bytes(3000, seed: 3)  // named by no row yet
        let (freeSHA, premiumSHA, ownSHA) = (sha256Hex(free), sha256Hex(premium), sha256Hex(own))
        try world.execute(
            """
            ALTER TABLE photos ADD COLUMN image text;
            UPDATE photos SET image = '\(freeSHA)' WHERE id = '5f0e1d2c-3b4a-4958-8776-655443322101';
            UPDATE photos SET image = '\(premiumSHA)' WHERE id = '5f0e1d2c-3b4a-4958-8776-655443322103';
            """)
        // The template, with photos.image an attachment column.
        var text = try String(contentsOfFile: world.template.path, encoding: .utf8)
        text = text.replacingOccurrences(
            of: "  - name: photos\n    source: photos\n",
            with: "  - name: photos\n    source: photos\n    attachments: { image: {download: eager} }\n")
        #expect(text.contains("attachments:"))
        let path = world.directory.appending("campgrounds-tiered.yml")
        try text.write(to: path, atomically: true, encoding: .utf8)
        let template = try Template.load(path: path.path)
        let scoped = ScopedServerTests.World(database: world.database, directory: world.directory, template: template)
        try await scoped.publish()
        try await scoped.withServer { client in
            let base = "/v1/datasets/\(ScopedServerTests.dataset)/attachments/"
            // Uploads need a token (401 without); with one they are stored.
            let anonymous = try await client.execute(uri: base + freeSHA, method: .put, body: ByteBuffer(bytes: free))
            #expect(anonymous.status == .unauthorized)
            for (sha, bytes) in [(freeSHA, free), (premiumSHA, premium)] {
                let put = try await client.execute(
                    uri: base + sha, method: .put, headers: Self.bob, body: ByteBuffer(bytes: bytes))
                #expect(put.status == .created)
            }
            let mine = try await client.execute(
                uri: base + ownSHA, method: .put, headers: Self.alice, body: ByteBuffer(bytes: own))
            #expect(mine.status == .created)
            // No token: 401.
            #expect(try await client.execute(uri: base + freeSHA, method: .get).status == .unauthorized)
            // Alice (tier 0): the free photo her rows name, and her own upload; the premium one is 404.
            let aliceFree = try await client.execute(uri: base + freeSHA, method: .get, headers: Self.alice)
            #expect(aliceFree.status == .ok && aliceFree.bodyData == free)
            #expect(aliceFree.header("Cache-Control") == "private, max-age=31536000, immutable")
            #expect(
                try await client.execute(uri: base + premiumSHA, method: .get, headers: Self.alice).status == .notFound)
            #expect(try await client.execute(uri: base + ownSHA, method: .get, headers: Self.alice).status == .ok)
            // Bob (tier 2): both photos his rows name (and he uploaded); Alice's own upload is 404 to him.
            #expect(try await client.execute(uri: base + premiumSHA, method: .get, headers: Self.bob).status == .ok)
            #expect(try await client.execute(uri: base + freeSHA, method: .head, headers: Self.bob).status == .ok)
            #expect(try await client.execute(uri: base + ownSHA, method: .get, headers: Self.bob).status == .notFound)

            // When a premium campground's photo comes to name Alice's upload (the next version, stored as a step),
            // then Bob's scope names it and he reads it.
            try scoped.execute(
                "UPDATE photos SET image = '\(ownSHA)', updated_at = now() WHERE id = '5f0e1d2c-3b4a-4958-8776-655443322102'"
            )
            try await scoped.publish()
            let manifest = try scoped.scoped()
            let bobScope = try #require(manifest.scopes.first { $0.scope == "2" })
            #expect(bobScope.retained.last?.isCheckpoint == false, "the new version is a step")
            let newest = try #require(bobScope.retained.last?.version)
            let deadline = ContinuousClock.now + .seconds(20)
            var served = 0
            while served < newest, ContinuousClock.now < deadline {
                let response = try await client.execute(
                    uri: "/v1/datasets/\(ScopedServerTests.dataset)/manifest", method: .get, headers: Self.bob)
                served = (try? ScopedServerTests.manifest(response).version) ?? 0
                if served < newest { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(served == newest)
            let bobOwn = try await client.execute(uri: base + ownSHA, method: .get, headers: Self.bob)
            #expect(bobOwn.status == .ok && bobOwn.bodyData == own)
        }
    }
}
