import FerryCore
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import FerryServer

/// `/v1/datasets/{dataset}/objects/{object}` and the object lookups (`…/versions/{n}/object`,
/// `…/patches/{from}-{to}/object`): what a shared cache keys by and asks before serving (docs/deploy.md).
@Suite struct ObjectRouteTests {
    static func lookup(_ response: TestResponse) throws -> ObjectLookup {
        try JSONDecoder().decode(ObjectLookup.self, from: response.bodyData)
    }

    @Test(
        "the lookup names the object the version URL would answer: gzip when accepted, the SQLite file for a range without the gzip If-Range"
    )
    func lookupFollowsTheVersionURL() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish(rows: 50, blobBytes: 200_000)
        let sha = manifest.sha256
        try await store.withLiveServer { client in
            let uri = "/v1/datasets/trips/versions/1/object"
            let cases: [(HTTPFields, String)] = [
                ([:], "\(sha).sqlite"),
                ([.acceptEncoding: "gzip"], "\(sha).sqlite.gz"),
                ([.acceptEncoding: "gzip;q=0"], "\(sha).sqlite"),
                ([.acceptEncoding: "gzip", .range: "bytes=100-"], "\(sha).sqlite"),
                ([.acceptEncoding: "gzip", .range: "bytes=100-", .ifRange: "\"\(sha)-gzip\""], "\(sha).sqlite.gz"),
            ]
            for (headers, object) in cases {
                // Given a request's headers, when the lookup is asked with them, then it names what /versions/1 sends.
                let response = try await client.execute(uri: uri, method: .get, headers: headers)
                #expect(response.status == .ok, "\(headers)")
                #expect(response.header("Ferry-Object") == object, "\(headers)")
                #expect(response.header("Cache-Control") == "no-store" && response.header("Ferry-Version") == "1")
                let body = try Self.lookup(response)
                #expect(
                    body.object == object && body.url == "/v1/datasets/trips/objects/\(object)" && body.version == 1)
                let version = try await client.execute(
                    uri: "/v1/datasets/trips/versions/1", method: .get, headers: headers)
                #expect(version.header("ETag") == body.etag, "\(headers)")
                let total = version.header("Content-Range").flatMap { $0.split(separator: "/").last }.flatMap {
                    Int64($0)
                }
                let size: Int64 = total ?? Int64(version.body.readableBytes)
                #expect(size == body.size, "\(headers)")
            }
            for (bad, status) in [
                ("0", HTTPResponse.Status.badRequest), ("01", .badRequest), ("x", .badRequest), ("2", .notFound),
            ] {
                let response = try await client.execute(uri: "/v1/datasets/trips/versions/\(bad)/object", method: .get)
                #expect(response.status == status, "\(bad)")
                #expect(response.header("Ferry-Object") == nil)
            }
            let unknown = try await client.execute(uri: "/v1/datasets/nope/versions/1/object", method: .get)
            #expect(unknown.status == .notFound)
        }
    }

    @Test(
        "an object URL answers one representation with the version URL's headers: ranges, 304, HEAD; malformed names 400, others 404"
    )
    func objectsByName() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish(rows: 50, blobBytes: 200_000)
        let sha = manifest.sha256
        let sqlite = try store.snapshotBytes(version: 1)
        let gzip = try store.gzipBytes(version: 1)
        try await store.withLiveServer { client in
            let base = "/v1/datasets/trips/objects"
            let version = try await client.execute(
                uri: "/v1/datasets/trips/versions/1", method: .get, headers: [.acceptEncoding: "gzip"])
            // Whatever the client accepts, the name fixes the bytes.
            for accept in ["gzip", "identity"] {
                let compressed = try await client.execute(
                    uri: "\(base)/\(sha).sqlite.gz", method: .get, headers: [.acceptEncoding: accept])
                #expect(compressed.status == .ok && compressed.bodyData == gzip)
                // A gzip file in its own right: no Content-Encoding, which a decoding client would apply to a range.
                #expect(
                    compressed.header("Content-Type") == "application/gzip"
                        && compressed.header("Content-Encoding") == nil)
                #expect(
                    version.header("Content-Type") == "application/vnd.sqlite3"
                        && version.header("Content-Encoding") == "gzip")
                for name in [
                    "ETag", "Repr-Digest", "Ferry-Version", "Cache-Control", "Accept-Ranges", "Content-Length",
                ] {
                    #expect(compressed.header(name) == version.header(name), "\(name)")
                }
                #expect(compressed.header("Vary") == nil && compressed.header("ETag") == "\"\(sha)-gzip\"")
                let plain = try await client.execute(
                    uri: "\(base)/\(sha).sqlite", method: .get, headers: [.acceptEncoding: accept])
                #expect(plain.status == .ok && plain.bodyData == sqlite && plain.header("Content-Encoding") == nil)
                #expect(
                    plain.header("ETag") == "\"\(sha)\""
                        && plain.header("Cache-Control") == "public, max-age=31536000, immutable")
            }
            // A range of the gzip copy is a slice of its bytes, with or without If-Range (the name says which bytes),
            // and says no Content-Encoding: the fuzzer's client failed to inflate such a slice when it did.
            let part = try await client.execute(
                uri: "\(base)/\(sha).sqlite.gz", method: .get,
                headers: [.range: "bytes=10-99", .acceptEncoding: "gzip"])
            #expect(part.status == .partialContent && part.bodyData == gzip[10..<100])
            #expect(
                part.header("Content-Range") == "bytes 10-99/\(gzip.count)" && part.header("Content-Encoding") == nil)
            #expect(part.header("Content-Type") == "application/gzip")
            let resumed = try await client.execute(
                uri: "\(base)/\(sha).sqlite.gz", method: .get,
                headers: [.range: "bytes=100-", .ifRange: "\"\(sha)-gzip\""])
            #expect(resumed.status == .partialContent && resumed.bodyData == gzip[100...])
            let otherTag = try await client.execute(
                uri: "\(base)/\(sha).sqlite.gz", method: .get, headers: [.range: "bytes=100-", .ifRange: "\"\(sha)\""])
            #expect(otherTag.status == .ok && otherTag.bodyData == gzip)
            let outside = try await client.execute(
                uri: "\(base)/\(sha).sqlite", method: .get, headers: [.range: "bytes=\(sqlite.count)-"])
            #expect(
                outside.status == .rangeNotSatisfiable && outside.header("Content-Range") == "bytes */\(sqlite.count)")
            let notModified = try await client.execute(
                uri: "\(base)/\(sha).sqlite.gz", method: .get, headers: [.ifNoneMatch: "W/\"\(sha)-gzip\""])
            #expect(notModified.status == .notModified && notModified.header("ETag") == "\"\(sha)-gzip\"")
            #expect(
                notModified.header("Content-Type") == nil
                    && notModified.header("Cache-Control") == "public, max-age=31536000, immutable")
            let otherRepresentation = try await client.execute(
                uri: "\(base)/\(sha).sqlite.gz", method: .get, headers: [.ifNoneMatch: "\"\(sha)\""])
            #expect(otherRepresentation.status == .ok)
            let head = try await client.execute(uri: "\(base)/\(sha).sqlite", method: .head)
            #expect(
                head.status == .ok && head.body.readableBytes == 0
                    && head.header("Content-Length") == String(sqlite.count))

            let upper = sha.uppercased()
            for bad in [
                "\(upper).sqlite", "\(sha).db", "\(sha)", "\(sha.prefix(63)).sqlite", "\(sha).sqlite.gz.gz",
                "..%2F\(sha).sqlite", "x",
            ] {
                let response = try await client.execute(uri: "\(base)/\(bad)", method: .get)
                #expect(response.status == .badRequest, "\(bad)")
            }
            let unknown = try await client.execute(
                uri: "\(base)/\(String(repeating: "0", count: 64)).sqlite", method: .get)
            #expect(unknown.status == .notFound && unknown.header("Cache-Control") == "no-store")
        }
    }

    @Test("a pruned version's objects are 404; a patch has its object and its lookup")
    func prunedAndPatches() async throws {
        let (store, ref) = try PatchRouteTests.storeWithPatch()
        defer { store.remove() }
        let v1 = try store.store.requireManifest("trips").entry(for: nil)!.record(version: 1)!.sha256
        try await store.withLiveServer { client in
            let lookup = try await client.execute(
                uri: "/v1/datasets/trips/patches/1-2/object", method: .get, headers: [.acceptEncoding: "gzip"])
            #expect(
                lookup.status == .ok && lookup.header("Ferry-Object") == "\(ref.sha256).patch.gz"
                    && lookup.header("Ferry-Version") == "2")
            let patch = try await client.execute(uri: "/v1/datasets/trips/objects/\(ref.sha256).patch.gz", method: .get)
            #expect(
                patch.status == .ok && sha256Hex(patch.body) == ref.sha256
                    && patch.header("Content-Type") == "application/gzip")
            for bad in ["2-1", "1-3"] {
                let response = try await client.execute(uri: "/v1/datasets/trips/patches/\(bad)/object", method: .get)
                #expect(response.status == (bad == "2-1" ? .badRequest : .notFound), "\(bad)")
            }
            let old = try await client.execute(uri: "/v1/datasets/trips/objects/\(v1).sqlite", method: .get)
            #expect(old.status == .ok)
            // Given a publish that keeps only the newest version, when the catalog has reloaded, then v1's objects are
            // gone.
            try store.publish(rows: 30, keep: 1)
            var pruned = try await client.execute(uri: "/v1/datasets/trips/objects/\(v1).sqlite", method: .get)
            let deadline = ContinuousClock.now + .seconds(30)
            while pruned.status != .notFound, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
                pruned = try await client.execute(uri: "/v1/datasets/trips/objects/\(v1).sqlite", method: .get)
            }
            #expect(pruned.status == .notFound)
            let prunedPatch = try await client.execute(
                uri: "/v1/datasets/trips/objects/\(ref.sha256).patch.gz", method: .get)
            #expect(prunedPatch.status == .notFound)
        }
    }

    @Test(
        "scoped: each token's lookup names its own scope's object; another scope's object is 404, no token 401; answers stay private"
    )
    func scopedObjects() async throws {
        let world = try ScopedServerTests.World.make("scoped-objects")
        defer { world.close() }
        try await world.publish()
        let scopes = try world.scoped()
        let free = try #require(scopes.entry(for: "0")).current.sha256
        let premium = try #require(scopes.entry(for: "2")).current.sha256
        #expect(free != premium)
        try await world.withServer { client in
            let base = "/v1/datasets/\(ScopedServerTests.dataset)"
            for (token, own, other) in [
                (ScopedServerTests.alice, free, premium), (ScopedServerTests.bob, premium, free),
            ] {
                let lookup = try await client.execute(
                    uri: "\(base)/versions/1/object", method: .get, headers: token + [.acceptEncoding: "gzip"])
                #expect(lookup.status == .ok && lookup.header("Ferry-Object") == "\(own).sqlite.gz")
                #expect(lookup.header("Cache-Control") == "no-store")
                let mine = try await client.execute(
                    uri: "\(base)/objects/\(own).sqlite.gz", method: .get, headers: token)
                #expect(mine.status == .ok && mine.header("Cache-Control") == "private, max-age=31536000, immutable")
                for name in ["\(other).sqlite.gz", "\(other).sqlite"] {
                    let theirs = try await client.execute(uri: "\(base)/objects/\(name)", method: .get, headers: token)
                    #expect(
                        theirs.status == .notFound && theirs.body.readableBytes < 400
                            && !theirs.bodyString.contains("ferry_snapshot"))
                }
            }
            for uri in [
                "\(base)/objects/\(free).sqlite.gz", "\(base)/versions/1/object", "\(base)/objects/\(free).sqlite",
            ] {
                for headers: HTTPFields in [[:], [.authorization: "Bearer not-a-token"]] {
                    let response = try await client.execute(uri: uri, method: .get, headers: headers)
                    #expect(response.status == .unauthorized, "\(uri)")
                    #expect(response.header("Ferry-Object") == nil && response.header("Cache-Control") == "no-store")
                }
            }
        }
    }
}
