import FerryCore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import FerryServer

@Suite struct RangeTests {
    @Test func everyRangeFormAndEdgeCaseOnTheLiveServer() async throws {
        // Given a snapshot spanning several 64 KiB chunks
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish(blobBytes: 400_000)
        let file = try store.snapshotBytes(version: 1)
        let size = file.count
        #expect(Int64(size) == manifest.size)

        try await store.withLiveServer { client in
            // (Range, expected first byte, expected last byte)
            let satisfiable: [(String, Int, Int)] = [
                ("bytes=0-99", 0, 99),
                ("bytes=100-", 100, size - 1),
                ("bytes=-100", size - 100, size - 1),
                ("bytes=\(size - 1)-\(size - 1)", size - 1, size - 1),  // the last byte
                ("bytes=\(size - 1)-", size - 1, size - 1),
                ("bytes=-\(size + 10)", 0, size - 1),  // suffix longer than the file
                ("bytes=10-\(size + 1000)", 10, size - 1),  // end beyond the file
                ("bytes=0-0", 0, 0),
                ("Bytes=70000-200000", 70000, 200000),  // the unit is case-insensitive
                ("bytes=5-99999999999999999999999", 5, size - 1),  // huge end clamps
            ]
            for (range, first, last) in satisfiable {
                for uri in ["/v1/datasets/trips/snapshot", "/v1/datasets/trips/versions/1"] {
                    let response = try await client.execute(uri: uri, method: .get, headers: [.range: range])
                    #expect(response.status == .partialContent, "\(range)")
                    #expect(response.header("Content-Range") == "bytes \(first)-\(last)/\(size)", "\(range)")
                    #expect(response.header("Content-Length") == String(last - first + 1), "\(range)")
                    #expect(sha256Hex(response.bodyData) == sha256Hex(file.subdata(in: first..<(last + 1))), "\(range)")
                    #expect(response.header("ETag") == "\"\(manifest.sha256)\"")
                    #expect(response.header("Ferry-Version") == "1")
                }
            }

            // Unsatisfiable → 416 with Content-Range: bytes */size
            for range in [
                "bytes=\(size)-", "bytes=\(size)-\(size + 5)", "bytes=-0", "bytes=\(size + 100)-", "bytes=-0,\(size)-",
            ] {
                let response = try await client.execute(
                    uri: "/v1/datasets/trips/snapshot", method: .get, headers: [.range: range])
                #expect(response.status == .rangeNotSatisfiable, "\(range)")
                #expect(response.header("Content-Range") == "bytes */\(size)", "\(range)")
                #expect(response.bodyString.contains(#""code":"range-not-satisfiable""#))
            }

            // Syntactically invalid, other units, and multiple ranges → 200 with the full, correct body
            for range in [
                "bytes=abc", "bytes=5-1", "items=0-1", "bytes=", "bytes=1-2-3", "bytes=0-1,5-6", "bytes=-", "bytes 0-1",
            ] {
                let response = try await client.execute(
                    uri: "/v1/datasets/trips/snapshot", method: .get, headers: [.range: range])
                #expect(response.status == .ok, "\(range)")
                #expect(response.header("Content-Range") == nil)
                #expect(sha256Hex(response.body) == manifest.sha256, "\(range)")
            }

            // HEAD ignores Range (RFC 9110 defines range handling for GET only)
            let head = try await client.execute(
                uri: "/v1/datasets/trips/snapshot", method: .head, headers: [.range: "bytes=0-9"])
            #expect(head.status == .ok)
            #expect(head.header("Content-Length") == String(size))
        }
    }

    @Test func ifRangeServesThePartOnlyForTheSameStrongETag() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish(blobBytes: 200_000)
        let file = try store.snapshotBytes(version: 1)

        try await store.withLiveServer { client in
            // Matching strong ETag → 206
            let match = try await client.execute(
                uri: "/v1/datasets/trips/snapshot", method: .get,
                headers: [.range: "bytes=1000-", .ifRange: "\"\(manifest.sha256)\""])
            #expect(match.status == .partialContent)
            #expect(match.bodyData == file.subdata(in: 1000..<file.count))

            // A different ETag, a weak ETag, or a date → 200 with the full body
            for ifRange in [
                "\"\(String(repeating: "1", count: 64))\"", "W/\"\(manifest.sha256)\"", "Sat, 21 Nov 2026 10:00:00 GMT",
                "garbage",
            ] {
                let response = try await client.execute(
                    uri: "/v1/datasets/trips/snapshot", method: .get,
                    headers: [.range: "bytes=1000-", .ifRange: ifRange])
                #expect(response.status == .ok, "If-Range: \(ifRange)")
                #expect(response.header("Content-Range") == nil)
                #expect(sha256Hex(response.body) == manifest.sha256)
            }

            // If-None-Match takes precedence over Range
            let both = try await client.execute(
                uri: "/v1/datasets/trips/snapshot", method: .get,
                headers: [.range: "bytes=0-9", .ifNoneMatch: "\"\(manifest.sha256)\""])
            #expect(both.status == .notModified)
        }
    }

    /// RFC 9110 §14.2: a range applies to the selected representation. A request that accepts gzip gets bytes of
    /// the stored gzip copy, validated by its own strong ETag, so a compressed download resumes exactly.
    @Test func rangeOnTheGzipRepresentation() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish(rows: 6000)
        let gzip = try store.gzipBytes(version: 1)
        let identity = try store.snapshotBytes(version: 1)
        let g = gzip.count
        #expect(g < identity.count)
        let gzipTag = "\"\(manifest.sha256)-gzip\""

        try await store.withLiveServer { client in
            for (uri, cacheControl) in [
                ("/v1/datasets/trips/snapshot", "no-cache"),
                ("/v1/datasets/trips/versions/1", "public, max-age=31536000, immutable"),
            ] {
                // Range + If-Range with the gzip ETag (a client resuming the gzip copy) → 206 with its bytes
                for (range, first, last) in [
                    ("bytes=100-", 100, g - 1), ("bytes=0-99", 0, 99), ("bytes=-50", g - 50, g - 1),
                ] {
                    do {
                        let headers: HTTPFields = [.acceptEncoding: "gzip", .range: range, .ifRange: gzipTag]
                        let response = try await client.execute(uri: uri, method: .get, headers: headers)
                        #expect(response.status == .partialContent, "\(uri) \(range)")
                        #expect(response.header("Content-Encoding") == "gzip")
                        #expect(response.header("Content-Range") == "bytes \(first)-\(last)/\(g)", "\(range)")
                        #expect(response.header("Content-Length") == String(last - first + 1))
                        #expect(response.header("ETag") == gzipTag)
                        #expect(response.header("Vary") == "Accept-Encoding")
                        #expect(response.header("Cache-Control") == cacheControl)
                        #expect(response.bodyData == gzip.subdata(in: first..<(last + 1)), "\(uri) \(range)")
                    }
                    // Without that If-Range, a range is of the SQLite file, whatever Accept-Encoding says: HTTP
                    // libraries decode Content-Encoding and cannot decode a slice of a gzip stream.
                    let plain = try await client.execute(
                        uri: uri, method: .get, headers: [.acceptEncoding: "gzip", .range: range])
                    #expect(
                        plain.status == .partialContent && plain.header("Content-Encoding") == nil, "\(uri) \(range)")
                    #expect(plain.header("ETag") == "\"\(manifest.sha256)\"")
                }

                // If-Range with the identity tag → a range of the SQLite file; a weak gzip tag or another tag (strong
                // comparison fails) → the whole SQLite file (200)
                let identityRange = try await client.execute(
                    uri: uri, method: .get,
                    headers: [.acceptEncoding: "gzip", .range: "bytes=100-", .ifRange: "\"\(manifest.sha256)\""])
                #expect(identityRange.status == .partialContent && identityRange.header("Content-Encoding") == nil)
                #expect(identityRange.bodyData == identity.subdata(in: 100..<identity.count))
                for ifRange in ["W/\(gzipTag)", "\"\(String(repeating: "1", count: 64))-gzip\""] {
                    let response = try await client.execute(
                        uri: uri, method: .get,
                        headers: [.acceptEncoding: "gzip", .range: "bytes=100-", .ifRange: ifRange])
                    #expect(response.status == .ok, "If-Range: \(ifRange)")
                    #expect(response.header("Content-Range") == nil)
                    #expect(response.header("Content-Encoding") == nil)
                    #expect(response.bodyData == identity)
                }
                // And the gzip tag on an identity request → the full SQLite file
                let identityRequest = try await client.execute(
                    uri: uri, method: .get,
                    headers: [.acceptEncoding: "identity", .range: "bytes=100-", .ifRange: gzipTag])
                #expect(identityRequest.status == .ok)
                #expect(identityRequest.header("Content-Encoding") == nil)
                #expect(identityRequest.bodyData == identity)

                // 416 counts the gzip copy's bytes: a start past its end, though inside the SQLite file
                let beyond = try await client.execute(
                    uri: uri, method: .get,
                    headers: [.acceptEncoding: "gzip", .range: "bytes=\(g)-", .ifRange: gzipTag])
                #expect(beyond.status == .rangeNotSatisfiable)
                #expect(beyond.header("Content-Range") == "bytes */\(g)")
                #expect(beyond.header("ETag") == gzipTag)
                #expect(beyond.header("Vary") == "Accept-Encoding")
                #expect(beyond.bodyString.contains(#""code":"range-not-satisfiable""#))
                // The same range in the identity encoding is satisfiable
                let sameRange = try await client.execute(uri: uri, method: .get, headers: [.range: "bytes=\(g)-"])
                #expect(sameRange.status == .partialContent)
                #expect(sameRange.header("Content-Range") == "bytes \(g)-\(identity.count - 1)/\(identity.count)")
                #expect(sameRange.header("Content-Encoding") == nil)

                // A download cut anywhere and resumed with Range + If-Range is the gzip copy, which inflates to the
                // published file
                let cut = g / 3
                let rest = try await client.execute(
                    uri: uri, method: .get,
                    headers: [.acceptEncoding: "gzip", .range: "bytes=\(cut)-", .ifRange: gzipTag])
                #expect(gzip.prefix(cut) + rest.bodyData == gzip)
            }

            // HEAD still ignores Range, in either encoding
            let head = try await client.execute(
                uri: "/v1/datasets/trips/versions/1", method: .head,
                headers: [.acceptEncoding: "gzip", .range: "bytes=0-9"])
            #expect(head.status == .ok)
            #expect(head.header("Content-Length") == String(g))
            #expect(head.header("Content-Encoding") == "gzip")
        }
    }

    @Test func rangeParsingFollowsRFC9110() {
        // Pure checks of the parser, including an empty representation
        #expect(ByteRangeRequest.resolve("bytes=0-9", size: 100) == .single(start: 0, end: 9))
        #expect(ByteRangeRequest.resolve("bytes=-10", size: 100) == .single(start: 90, end: 99))
        #expect(ByteRangeRequest.resolve("bytes=-200", size: 100) == .single(start: 0, end: 99))
        #expect(ByteRangeRequest.resolve("bytes=99-", size: 100) == .single(start: 99, end: 99))
        #expect(ByteRangeRequest.resolve("bytes=100-", size: 100) == .unsatisfiable)
        #expect(ByteRangeRequest.resolve("bytes=-0", size: 100) == .unsatisfiable)
        #expect(ByteRangeRequest.resolve("bytes=0-", size: 0) == .unsatisfiable)
        #expect(ByteRangeRequest.resolve("bytes=-5", size: 0) == .unsatisfiable)
        #expect(ByteRangeRequest.resolve("bytes=9-0", size: 100) == .ignore)
        #expect(ByteRangeRequest.resolve("bytes=0-1,3-4", size: 100) == .ignore)
        #expect(ByteRangeRequest.resolve("bytes=0-1,", size: 100) == .single(start: 0, end: 1))
        #expect(ByteRangeRequest.resolve("bytes=200-,300-", size: 100) == .unsatisfiable)
        #expect(ByteRangeRequest.resolve("bytes=+1-2", size: 100) == .ignore)
        #expect(ByteRangeRequest.resolve("pages=1-2", size: 100) == .ignore)
    }
}
