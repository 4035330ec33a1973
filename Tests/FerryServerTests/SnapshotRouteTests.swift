import FerryCore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import FerryServer

@Suite struct SnapshotRouteTests {
    @Test func latestSnapshotHasEveryHeaderAndTheRightBytes() async throws {
        // Given a store with one published version
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish(blobBytes: 300_000)
        let expected = try store.snapshotBytes(version: 1)

        try await store.withLiveServer { client in
            // When the latest snapshot is fetched without conditions
            let response = try await client.execute(uri: "/v1/datasets/trips/snapshot", method: .get)

            // Then it is the file's exact bytes with the contract's headers
            #expect(response.status == .ok)
            #expect(sha256Hex(response.body) == manifest.sha256)
            #expect(response.body.readableBytes == expected.count)
            #expect(response.header("Content-Type") == "application/vnd.sqlite3")
            #expect(response.header("ETag") == "\"\(manifest.sha256)\"")
            #expect(response.header("Ferry-Version") == "1")
            #expect(response.header("Repr-Digest") == FileDigest.reprDigest(hex: manifest.sha256))
            #expect(response.header("Accept-Ranges") == "bytes")
            #expect(response.header("Cache-Control") == "no-cache")
            #expect(response.header("Vary") == "Accept-Encoding")
            #expect(response.header("Content-Length") == String(expected.count))
            #expect(response.header("Content-Encoding") == nil)
        }
    }

    @Test func notModifiedByHeaderByStarAndByChecksumQuery() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish()
        let etag = "\"\(manifest.sha256)\""

        try await store.withLiveServer { client in
            // If-None-Match with the current ETag, within a list, weak, or `*` → 304 with what RFC 9110 §15.4.5 asks
            // for: ETag, Cache-Control, Vary (and Date), nothing else
            let notModifiedFields = ["cache-control", "date", "etag", "vary"]
            for value in [etag, "\"0000\", \(etag)", "W/\(etag)", "*"] {
                let response = try await client.execute(
                    uri: "/v1/datasets/trips/snapshot", method: .get, headers: [.ifNoneMatch: value])
                #expect(response.status == .notModified, "If-None-Match: \(value)")
                #expect(response.body.readableBytes == 0)
                #expect(response.header("ETag") == etag)
                #expect(response.header("Cache-Control") == "no-cache")
                #expect(response.header("Vary") == "Accept-Encoding")
                #expect(
                    Set(response.headers.map { $0.name.canonicalName }) == Set(notModifiedFields), "\(response.headers)"
                )
            }
            // The book's style: ?checksum=<sha256 hex> (upper case is the same number)
            for checksum in [manifest.sha256, manifest.sha256.uppercased()] {
                let response = try await client.execute(
                    uri: "/v1/datasets/trips/snapshot?checksum=\(checksum)", method: .get)
                #expect(response.status == .notModified)
                #expect(response.header("ETag") == etag)
                #expect(
                    Set(response.headers.map { $0.name.canonicalName }) == Set(notModifiedFields), "\(response.headers)"
                )
            }
            // A different ETag or checksum → the full body
            let stale = String(repeating: "0", count: 64)
            let byHeader = try await client.execute(
                uri: "/v1/datasets/trips/snapshot", method: .get, headers: [.ifNoneMatch: "\"\(stale)\""])
            #expect(byHeader.status == .ok)
            #expect(sha256Hex(byHeader.body) == manifest.sha256)
            let byQuery = try await client.execute(uri: "/v1/datasets/trips/snapshot?checksum=\(stale)", method: .get)
            #expect(byQuery.status == .ok)
            #expect(sha256Hex(byQuery.body) == manifest.sha256)
            // A malformed checksum is a 400 with the JSON error shape
            for bad in ["abc", String(repeating: "g", count: 64), "", "..%2F..%2Fetc"] {
                let response = try await client.execute(
                    uri: "/v1/datasets/trips/snapshot?checksum=\(bad)", method: .get)
                #expect(response.status == .badRequest, "checksum=\(bad)")
                #expect(response.bodyString.contains(#""code":"bad-input""#))
            }
        }
    }

    @Test func headAnswersTheSameHeadersWithoutABody() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish(blobBytes: 100_000)
        try await store.withLiveServer { client in
            let get = try await client.execute(uri: "/v1/datasets/trips/snapshot", method: .get)
            let head = try await client.execute(uri: "/v1/datasets/trips/snapshot", method: .head)
            #expect(head.status == .ok)
            #expect(head.body.readableBytes == 0)
            for name in [
                "Content-Type", "ETag", "Ferry-Version", "Repr-Digest", "Accept-Ranges", "Cache-Control", "Vary",
                "Content-Length",
            ] {
                #expect(head.header(name) == get.header(name), "\(name)")
            }
            #expect(head.header("Content-Length") == String(manifest.size))
            let version = try await client.execute(uri: "/v1/datasets/trips/versions/1", method: .head)
            #expect(version.status == .ok)
            #expect(version.body.readableBytes == 0)
            #expect(version.header("Cache-Control") == "public, max-age=31536000, immutable")
        }
    }

    @Test func gzipIsNegotiatedAndQZeroRefusesIt() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish(rows: 2000)
        let gzip = try store.gzipBytes(version: 1)
        let gzipDigest = sha256Hex(gzip)

        try await store.withLiveServer { client in
            // Accept-Encoding: gzip → the stored gzip copy, its own length, ETag and digest
            for accept in ["gzip", "br, gzip;q=0.5", "*", "x-gzip"] {
                let response = try await client.execute(
                    uri: "/v1/datasets/trips/snapshot", method: .get, headers: [.acceptEncoding: accept])
                #expect(response.status == .ok, "\(accept)")
                #expect(response.header("Content-Encoding") == "gzip", "\(accept)")
                #expect(sha256Hex(response.body) == gzipDigest)
                #expect(response.header("Content-Length") == String(gzip.count))
                #expect(response.header("ETag") == "\"\(manifest.sha256)-gzip\"")
                #expect(response.header("Repr-Digest") == FileDigest.reprDigest(hex: gzipDigest))
                #expect(response.header("Vary") == "Accept-Encoding")
                #expect(response.header("Ferry-Version") == "1")
            }
            // q=0 (explicit or through `*`) and other codings → identity
            for accept in ["gzip;q=0", "br", "*;q=0", "gzip; q=0.000, br", "identity"] {
                let response = try await client.execute(
                    uri: "/v1/datasets/trips/snapshot", method: .get, headers: [.acceptEncoding: accept])
                #expect(response.status == .ok)
                #expect(response.header("Content-Encoding") == nil, "\(accept)")
                #expect(sha256Hex(response.body) == manifest.sha256, "\(accept)")
            }
            // The identity ETag still means "you have it" on a gzip request, and the 304 echoes it
            let held = try await client.execute(
                uri: "/v1/datasets/trips/snapshot", method: .get,
                headers: [.acceptEncoding: "gzip", .ifNoneMatch: "\"\(manifest.sha256)\""])
            #expect(held.status == .notModified)
            #expect(held.header("ETag") == "\"\(manifest.sha256)\"")
            let heldGzip = try await client.execute(
                uri: "/v1/datasets/trips/snapshot", method: .get,
                headers: [.acceptEncoding: "gzip", .ifNoneMatch: "\"\(manifest.sha256)-gzip\""])
            #expect(heldGzip.status == .notModified)
            #expect(heldGzip.header("ETag") == "\"\(manifest.sha256)-gzip\"")
            // A range applies to the selected representation: bytes of the gzip copy for a client resuming it (If-Range
            // with its ETag; RangeTests covers the details), of the SQLite file otherwise
            let ranged = try await client.execute(
                uri: "/v1/datasets/trips/snapshot", method: .get,
                headers: [.acceptEncoding: "gzip", .range: "bytes=0-99", .ifRange: "\"\(manifest.sha256)-gzip\""])
            #expect(ranged.status == .partialContent)
            #expect(ranged.header("Content-Encoding") == "gzip")
            #expect(ranged.bodyData == gzip.prefix(100))
            let rangedIdentity = try await client.execute(
                uri: "/v1/datasets/trips/snapshot", method: .get,
                headers: [.acceptEncoding: "identity", .range: "bytes=0-99"])
            #expect(rangedIdentity.status == .partialContent)
            #expect(rangedIdentity.header("Content-Encoding") == nil)
            #expect(rangedIdentity.bodyData == (try store.snapshotBytes(version: 1)).prefix(100))
        }
    }

    @Test func versionURLsAreImmutableAndPrunedVersionsAre404() async throws {
        // Given three publishes with keep = 2: version 1 pruned, 2 and 3 retained
        let store = try TestStore()
        defer { store.remove() }
        let v1 = try store.publish(keep: 2)
        let v2 = try store.publish(keep: 2)
        let v3 = try store.publish(keep: 2)
        #expect(v3.versions == [2, 3])

        try await store.withLiveServer { client in
            for (number, manifest) in [(2, v2), (3, v3)] {
                let response = try await client.execute(uri: "/v1/datasets/trips/versions/\(number)", method: .get)
                #expect(response.status == .ok)
                #expect(sha256Hex(response.body) == manifest.sha256)
                #expect(response.header("ETag") == "\"\(manifest.sha256)\"")
                #expect(response.header("Ferry-Version") == String(number))
                #expect(response.header("Cache-Control") == "public, max-age=31536000, immutable")
                let revalidated = try await client.execute(
                    uri: "/v1/datasets/trips/versions/\(number)", method: .get,
                    headers: [.ifNoneMatch: "\"\(manifest.sha256)\""])
                #expect(revalidated.status == .notModified)
                #expect(revalidated.header("Cache-Control") == "public, max-age=31536000, immutable")
            }
            // The latest URL serves version 3
            let latest = try await client.execute(uri: "/v1/datasets/trips/snapshot", method: .get)
            #expect(latest.header("Ferry-Version") == "3")
            #expect(sha256Hex(latest.body) == v3.sha256)
            // Pruned and never-published versions → 404 JSON
            for number in [1, 4, 999] {
                let response = try await client.execute(uri: "/v1/datasets/trips/versions/\(number)", method: .get)
                #expect(response.status == .notFound, "version \(number)")
                #expect(response.header("Content-Type") == "application/json")
                #expect(response.bodyString.contains(#""code":"not-found""#))
            }
            _ = v1
            // Malformed versions → 400
            for bad in ["0", "01", "-1", "1.5", "abc", "1e3", "99999999999999999999", "%31"] {
                let response = try await client.execute(uri: "/v1/datasets/trips/versions/\(bad)", method: .get)
                #expect(response.status == .badRequest, "version \(bad)")
                #expect(response.bodyString.contains(#""code":"bad-input""#))
            }
        }
    }

    @Test func aConnectionCloseDownloadDeliversEveryByteBeforeClosing() async throws {
        // Given a multi-chunk snapshot and a client that asks the server to close after the response
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish(blobBytes: 4 << 20)
        try await store.withLiveServer { client in
            let port = try #require(client.port)
            for _ in 0..<3 {
                let (status, body) = try await offPool {
                    let connection = try RawHTTPConnection(port: port)
                    try connection.send(
                        "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    let head = try connection.readHead()
                    // When the body is read, slowly at first, until the server closes
                    Thread.sleep(forTimeInterval: 0.05)
                    return (head.status, try connection.readToEnd())
                }
                #expect(status == 200)
                // Then nothing queued at close time was dropped
                #expect(body.count == Int(manifest.size))
                #expect(sha256Hex(Data(body)) == manifest.sha256)
            }
        }
    }
}
