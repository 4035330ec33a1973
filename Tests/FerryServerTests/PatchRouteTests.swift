import FerryCore
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import FerryServer

/// `GET|HEAD /v1/datasets/{dataset}/patches/{from}-{to}`: immutable, conditional, ranged, like a version URL.
@Suite struct PatchRouteTests {
    /// Versions 1 and 2 of trips, with a stored patch 1 → 2 named in version 2's record.
    static func storeWithPatch() throws -> (TestStore, PatchRef) {
        let store = try TestStore()
        try store.publish(rows: 20)
        try store.publish(rows: 25)
        let diff = try Changeset.diff(
            from: store.store.snapshotURL(dataset: "trips", version: 1),
            to: store.store.snapshotURL(dataset: "trips", version: 2), tables: ["trips"])
        let ref = try #require(
            try store.store.storePatch(
                dataset: "trips", changeset: diff, from: 1, base: String(repeating: "b", count: 64), to: 2, limit: .max)
        )
        var manifest = try store.store.requireManifest("trips")
        manifest.scopes[0].retained[1].published.patches = [ref]
        try store.store.commit(manifest)
        return (store, ref)
    }

    @Test func servesAPatchLikeAVersion() async throws {
        let (store, ref) = try Self.storeWithPatch()
        defer { store.remove() }
        try await store.withLiveServer { client in
            // The manifest lists the patch to the latest version
            let manifest = try await client.execute(uri: "/v1/datasets/trips/manifest", method: .get)
            #expect(try JSONDecoder().decode(Manifest.self, from: manifest.bodyData).current.patches == [ref])

            // A GET answers the stored bytes, immutable, with a strong ETag and Repr-Digest
            let full = try await client.execute(uri: "/v1/datasets/trips/patches/1-2", method: .get)
            #expect(
                full.status == .ok && sha256Hex(full.body) == ref.sha256 && Int64(full.body.readableBytes) == ref.size)
            #expect(full.header("Content-Type") == "application/gzip" && full.header("ETag") == "\"\(ref.sha256)\"")
            #expect(
                full.header("Cache-Control") == "public, max-age=31536000, immutable"
                    && full.header("Ferry-Version") == "2")
            #expect(full.header("Repr-Digest")?.hasPrefix("sha-256=:") == true)

            // Revalidation and ranges work as on version URLs
            let cached = try await client.execute(
                uri: "/v1/datasets/trips/patches/1-2", method: .get, headers: [.ifNoneMatch: "\"\(ref.sha256)\""])
            #expect(cached.status == .notModified && cached.body.readableBytes == 0)
            let part = try await client.execute(
                uri: "/v1/datasets/trips/patches/1-2", method: .get, headers: [.range: "bytes=0-9"])
            #expect(
                part.status == .partialContent && part.body.readableBytes == 10
                    && part.header("Content-Range") == "bytes 0-9/\(ref.size)")
            let head = try await client.execute(uri: "/v1/datasets/trips/patches/1-2", method: .head)
            #expect(
                head.status == .ok && head.body.readableBytes == 0 && head.header("Content-Length") == String(ref.size))

            // Malformed names are 400, patches that were never made 404
            for bad in ["2-1", "01-2", "1-2-3", "x", "1-", "-2"] {
                let response = try await client.execute(uri: "/v1/datasets/trips/patches/\(bad)", method: .get)
                #expect(response.status == .badRequest, "\(bad)")
            }
            let missing = try await client.execute(uri: "/v1/datasets/trips/patches/1-3", method: .get)
            #expect(missing.status == .notFound && missing.bodyString.contains("start at: 1"))
        }
    }
}
