import FerryCore
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import FerryServer

/// `PUT|GET|HEAD /v1/datasets/{dataset}/attachments/{sha256}` on a public dataset: stored only when the body's
/// SHA-256 is its name, served immutable with ranges and 304s (docs/http-api.md, "Attachments").
@Suite struct AttachmentRouteTests {
    static func bytes(_ count: Int, seed: UInt8 = 7) -> Data {
        Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) })
    }

    static func uri(_ sha256: String, dataset: String = "trips") -> String {
        "/v1/datasets/\(dataset)/attachments/\(sha256)"
    }

    /// The files under a directory, recursively (relative paths).
    static func files(under url: URL) -> [String] {
        let enumerator = FileManager.default.enumerator(at: url, includingPropertiesForKeys: [.isRegularFileKey])
        var out: [String] = []
        while let item = enumerator?.nextObject() as? URL {
            if (try? item.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true {
                out.append(String(item.path.dropFirst(url.path.count)))
            }
        }
        return out.sorted()
    }

    @Test("PUT stores a body under its SHA-256 (201, then 200 when held); GET and HEAD serve it with its headers")
    func putThenGet() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        let photo = Self.bytes(300_000)
        let sha = sha256Hex(photo)
        try await store.withLiveServer { client in
            // Given a photo, when it is PUT, then it is stored now (201) and a second PUT is a success (200).
            let first = try await client.execute(
                uri: Self.uri(sha), method: .put, headers: [.contentType: "image/jpeg"], body: ByteBuffer(bytes: photo))
            #expect(first.status == .created, "\(first.bodyString)")
            let again = try await client.execute(
                uri: Self.uri(sha), method: .put, headers: [.contentType: "image/jpeg"], body: ByteBuffer(bytes: photo))
            #expect(again.status == .ok)
            // GET serves the bytes with an immutable, public Cache-Control and the uploaded type.
            let get = try await client.execute(uri: Self.uri(sha), method: .get)
            #expect(get.status == .ok)
            #expect(get.bodyData == photo)
            #expect(get.header("ETag") == "\"\(sha)\"")
            #expect(get.header("Content-Type") == "image/jpeg")
            #expect(get.header("Cache-Control") == "public, max-age=31536000, immutable")
            #expect(get.header("Accept-Ranges") == "bytes")
            #expect(get.header("Content-Length") == String(photo.count))
            let head = try await client.execute(uri: Self.uri(sha), method: .head)
            #expect(head.status == .ok && head.body.readableBytes == 0)
            #expect(head.header("Content-Length") == String(photo.count) && head.header("ETag") == "\"\(sha)\"")
            // Range, If-Range and If-None-Match as for a version URL.
            let range = try await client.execute(uri: Self.uri(sha), method: .get, headers: [.range: "bytes=100-199"])
            #expect(range.status == .partialContent)
            #expect(range.bodyData == photo[100..<200])
            #expect(range.header("Content-Range") == "bytes 100-199/\(photo.count)")
            let suffix = try await client.execute(uri: Self.uri(sha), method: .get, headers: [.range: "bytes=-10"])
            #expect(suffix.status == .partialContent && suffix.bodyData == photo.suffix(10))
            let stale = try await client.execute(
                uri: Self.uri(sha), method: .get, headers: [.range: "bytes=0-9", .ifRange: "\"other\""])
            #expect(stale.status == .ok && stale.bodyData == photo)
            let outside = try await client.execute(
                uri: Self.uri(sha), method: .get, headers: [.range: "bytes=\(photo.count)-"])
            #expect(outside.status == .rangeNotSatisfiable)
            #expect(outside.header("Content-Range") == "bytes */\(photo.count)")
            let cached = try await client.execute(
                uri: Self.uri(sha), method: .get, headers: [.ifNoneMatch: "\"\(sha)\""])
            #expect(cached.status == .notModified && cached.body.readableBytes == 0)
            #expect(cached.header("ETag") == "\"\(sha)\"")
            // An attachment not held is 404; a malformed name is 400; an unknown dataset is 404.
            let missing = try await client.execute(uri: Self.uri(String(repeating: "0", count: 64)), method: .get)
            #expect(missing.status == .notFound)
            for bad in ["x", sha.uppercased(), sha + "0", String(sha.dropLast())] {
                let response = try await client.execute(uri: Self.uri(bad), method: .get)
                #expect(response.status == .badRequest, "\(bad)")
            }
            let unknown = try await client.execute(uri: Self.uri(sha, dataset: "nope"), method: .get)
            #expect(unknown.status == .notFound)
        }
        let held = FileAttachmentStore(root: store.store.root)
        #expect(try Data(contentsOf: held.dataURL(dataset: "trips", sha256: sha)) == photo)
    }

    @Test("a forged body is 422 attachmentMismatch with nothing stored; a body over the limit is 413")
    func refusals() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        var configuration = store.configuration()
        configuration.maxAttachmentBytes = 1000
        let claimed = sha256Hex(Self.bytes(500))
        let forged = Self.bytes(500, seed: 9)
        try await store.withLiveServer(configuration) { client in
            let response = try await client.execute(
                uri: Self.uri(claimed), method: .put, body: ByteBuffer(bytes: forged))
            #expect(response.status == .unprocessableContent)
            #expect(response.bodyString.contains("\"code\":\"attachmentMismatch\""))
            let get = try await client.execute(uri: Self.uri(claimed), method: .get)
            #expect(get.status == .notFound)
            let badType = try await client.execute(
                uri: Self.uri(claimed), method: .put, headers: [.contentType: "no slash"],
                body: ByteBuffer(bytes: forged))
            #expect(badType.status == .badRequest)
            // Over the limit: 413 from Content-Length alone, before any byte of the body, and the connection closed.
            let port = try #require(client.port)
            let status = try await offPool { () -> Int in
                let connection = try RawHTTPConnection(port: port)
                connection.setTimeouts(seconds: 10)
                try connection.send(
                    "PUT \(Self.uri(claimed)) HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n")
                return try connection.readHead().status
            }
            #expect(status == 413)
            let metrics = try await client.execute(uri: "/metrics", method: .get).bodyString
            #expect(metrics.contains(#"ferry_attachment_refusals_total{dataset="trips",reason="mismatch"} 1"#))
            #expect(metrics.contains(#"ferry_attachment_refusals_total{dataset="trips",reason="too-large"} 1"#))
        }
        // Nothing stored, and no upload left behind.
        #expect(Self.files(under: store.store.root.appendingPathComponent("trips/attachments")).isEmpty)
        #expect(Self.files(under: store.store.root.appendingPathComponent(".ferry-uploads")).isEmpty)
    }

    @Test("the status page and its JSON show each dataset's attachments and their bytes")
    func statusShowsAttachments() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        var configuration = store.configuration()
        configuration.statusToken = "status-secret"
        let photos = [Self.bytes(1000, seed: 1), Self.bytes(2000, seed: 2)]
        try await store.withLiveServer(configuration) { client in
            for photo in photos {
                let put = try await client.execute(
                    uri: Self.uri(sha256Hex(photo)), method: .put, body: ByteBuffer(bytes: photo))
                #expect(put.status == .created)
            }
            let auth: HTTPFields = [.authorization: "Bearer status-secret"]
            let json = try await client.execute(uri: "/status.json", method: .get, headers: auth)
            let report = try JSONDecoder().decode(StatusReport.self, from: json.bodyData)
            #expect(report.datasets.first { $0.name == "trips" }?.attachments == .init(count: 2, bytes: 3000))
            let page = try await client.execute(uri: "/status", method: .get, headers: auth).bodyString
            #expect(page.contains(#"data-field="datasets.0.attachments.count" data-value="2""#))
        }
    }
}
