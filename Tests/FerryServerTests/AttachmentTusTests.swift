import FerryCore
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import FerryServer

/// Resumable uploads, tus 1.0.0 (`/v1/datasets/{dataset}/attachments/uploads`): a body cut midway keeps what
/// arrived, `HEAD` reports it, the rest is sent with `PATCH`, and the attachment is stored when its SHA-256 matches.
@Suite struct AttachmentTusTests {
    static let collection = "/v1/datasets/trips/attachments/uploads"
    static let tus: HTTPFields = [HTTPField.Name("Tus-Resumable")!: "1.0.0"]

    static func metadata(sha256: String, contentType: String = "image/jpeg") -> String {
        "sha256 \(Data(sha256.utf8).base64EncodedString()),contentType \(Data(contentType.utf8).base64EncodedString())"
    }

    static func create(_ client: any TestClientProtocol, length: Int, sha256: String) async throws -> String {
        var headers = tus
        headers[HTTPField.Name("Upload-Length")!] = String(length)
        headers[HTTPField.Name("Upload-Metadata")!] = metadata(sha256: sha256)
        let response = try await client.execute(uri: collection, method: .post, headers: headers)
        #expect(response.status == .created, "\(response.bodyString)")
        #expect(response.header("Upload-Offset") == "0" && response.header("Tus-Resumable") == "1.0.0")
        #expect(response.header("Upload-Expires")?.hasSuffix(" GMT") == true)
        return try #require(response.header("Location"))
    }

    static func offset(_ client: any TestClientProtocol, _ location: String) async throws -> (HTTPResponse.Status, Int?)
    {
        let response = try await client.execute(uri: location, method: .head, headers: tus)
        if response.status == .ok {
            #expect(response.header("Cache-Control") == "no-store")
        }
        return (response.status, response.header("Upload-Offset").flatMap { Int($0) })
    }

    static func patch(
        _ client: any TestClientProtocol, _ location: String, offset: Int, _ body: Data,
        contentType: String = "application/offset+octet-stream"
    ) async throws -> TestResponse {
        var headers = tus
        headers[.contentType] = contentType
        headers[HTTPField.Name("Upload-Offset")!] = String(offset)
        return try await client.execute(uri: location, method: .patch, headers: headers, body: ByteBuffer(bytes: body))
    }

    @Test("OPTIONS says what the server speaks; POST checks Tus-Resumable, Upload-Length and Upload-Metadata")
    func creation() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        let sha = String(repeating: "a", count: 64)
        try await store.withLiveServer { client in
            let options = try await client.execute(uri: Self.collection, method: .options)
            #expect(options.status == .noContent)
            #expect(options.header("Tus-Version") == "1.0.0" && options.header("Tus-Resumable") == "1.0.0")
            #expect(options.header("Tus-Extension") == "creation,expiration,termination")
            #expect(options.header("Tus-Max-Size") == String(64 << 20))
            let cases: [([String: String], HTTPResponse.Status)] = [
                (["Upload-Length": "10", "Upload-Metadata": Self.metadata(sha256: sha)], .preconditionFailed),
                (["Tus-Resumable": "1.0.0", "Upload-Metadata": Self.metadata(sha256: sha)], .badRequest),
                (
                    ["Tus-Resumable": "1.0.0", "Upload-Length": "-1", "Upload-Metadata": Self.metadata(sha256: sha)],
                    .badRequest
                ),
                (
                    ["Tus-Resumable": "1.0.0", "Upload-Length": "1e3", "Upload-Metadata": Self.metadata(sha256: sha)],
                    .badRequest
                ),
                (["Tus-Resumable": "1.0.0", "Upload-Length": "10"], .badRequest),
                (["Tus-Resumable": "1.0.0", "Upload-Length": "10", "Upload-Metadata": "sha256 !!!"], .badRequest),
                (
                    ["Tus-Resumable": "1.0.0", "Upload-Length": "10", "Upload-Metadata": Self.metadata(sha256: "abc")],
                    .badRequest
                ),
                (["Tus-Resumable": "1.0.0", "Upload-Length": "10", "Upload-Metadata": ",,"], .badRequest),
                (
                    [
                        "Tus-Resumable": "1.0.0", "Upload-Length": String((64 << 20) + 1),
                        "Upload-Metadata": Self.metadata(sha256: sha),
                    ],
                    .contentTooLarge
                ),
                (
                    ["Tus-Resumable": "0.2.2", "Upload-Length": "10", "Upload-Metadata": Self.metadata(sha256: sha)],
                    .preconditionFailed
                ),
            ]
            for (fields, status) in cases {
                var headers = HTTPFields()
                for (name, value) in fields { headers[HTTPField.Name(name)!] = value }
                let response = try await client.execute(uri: Self.collection, method: .post, headers: headers)
                #expect(response.status == status, "\(fields)")
                #expect(response.header("Tus-Resumable") == "1.0.0", "\(fields)")
            }
        }
    }

    @Test("a PATCH cut midway keeps the bytes that arrived; HEAD reports them; the rest completes the attachment")
    func resumeAfterACut() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        let photo = AttachmentRouteTests.bytes(200_000)
        let sha = sha256Hex(photo)
        let half = 120_000
        try await store.withLiveServer { client in
            let location = try await Self.create(client, length: photo.count, sha256: sha)
            #expect(try await Self.offset(client, location) == (.ok, 0))
            // Given a PATCH whose connection is closed after `half` of its bytes (a raw socket: send, then close).
            let port = try #require(client.port)
            try await offPool {
                let connection = try RawHTTPConnection(port: port)
                try connection.send(
                    "PATCH \(location) HTTP/1.1\r\nHost: x\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\n"
                        + "Content-Type: application/offset+octet-stream\r\nContent-Length: \(photo.count)\r\n\r\n")
                #expect(connection.trySend([UInt8](photo.prefix(half))))
            }
            // When HEAD asks, then it reports the bytes kept (waiting for the server to see the cut).
            let deadline = ContinuousClock.now + .seconds(20)
            var held: Int?
            while ContinuousClock.now < deadline {
                held = try await Self.offset(client, location).1
                if held == half { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(held == half)
            // A PATCH at another offset is 409 with the held one; the wrong type 415. Until the server has seen the
            // cut, the cut PATCH still holds the upload, and a PATCH is a 409 that names no offset: ask again.
            var conflict = try await Self.patch(client, location, offset: 0, photo.suffix(from: half))
            while conflict.header("Upload-Offset") == nil, conflict.status == .conflict, ContinuousClock.now < deadline
            {
                try await Task.sleep(for: .milliseconds(20))
                conflict = try await Self.patch(client, location, offset: 0, photo.suffix(from: half))
            }
            #expect(conflict.status == .conflict && conflict.header("Upload-Offset") == String(half))
            let wrongType = try await Self.patch(
                client, location, offset: half, photo.suffix(from: half), contentType: "application/octet-stream")
            #expect(wrongType.status == .unsupportedMediaType)
            // The rest completes it: 204 with the final offset, and the attachment is served.
            let rest = try await Self.patch(client, location, offset: half, Data(photo.suffix(from: half)))
            #expect(rest.status == .noContent, "\(rest.bodyString)")
            #expect(rest.header("Upload-Offset") == String(photo.count))
            let get = try await client.execute(uri: AttachmentRouteTests.uri(sha), method: .get)
            #expect(get.status == .ok && get.bodyData == photo && get.header("Content-Type") == "image/jpeg")
            // The partial upload is gone.
            #expect(try await Self.offset(client, location).0 == .notFound)
            let metrics = try await client.execute(uri: "/metrics", method: .get).bodyString
            #expect(metrics.contains(#"ferry_attachment_resumes_total{dataset="trips"} 1"#))
            #expect(metrics.contains(#"ferry_attachment_uploads_total{dataset="trips"} 1"#))
        }
    }

    @Test("a complete upload whose bytes are not its SHA-256 is 422 and deleted; DELETE terminates an upload")
    func mismatchAndTermination() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        let photo = AttachmentRouteTests.bytes(5000)
        let claimed = sha256Hex(AttachmentRouteTests.bytes(5000, seed: 3))
        try await store.withLiveServer { client in
            let location = try await Self.create(client, length: photo.count, sha256: claimed)
            let response = try await Self.patch(client, location, offset: 0, photo)
            #expect(response.status == .unprocessableContent)
            #expect(response.bodyString.contains("attachmentMismatch"))
            #expect(try await Self.offset(client, location).0 == .notFound)
            #expect(try await client.execute(uri: AttachmentRouteTests.uri(claimed), method: .get).status == .notFound)
            let other = try await Self.create(client, length: photo.count, sha256: sha256Hex(photo))
            let deleted = try await client.execute(uri: other, method: .delete, headers: Self.tus)
            #expect(deleted.status == .noContent)
            #expect(try await Self.offset(client, other).0 == .notFound)
            let unknown = try await client.execute(
                uri: Self.collection + "/" + String(repeating: "0", count: 32), method: .head, headers: Self.tus)
            #expect(unknown.status == .notFound)
            let malformed = try await client.execute(uri: Self.collection + "/x", method: .head, headers: Self.tus)
            #expect(malformed.status == .badRequest)
        }
        #expect(AttachmentRouteTests.files(under: store.store.root.appendingPathComponent(".ferry-uploads")).isEmpty)
    }

    @Test(
        "a PATCH short of the length keeps its bytes for HEAD; a resumed upload hashed from disk refuses a damaged part"
    )
    func shortPatchesAndADamagedResume() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        let photo = AttachmentRouteTests.bytes(300_000)
        let sha = sha256Hex(photo)
        let damaged = {
            var bytes = photo
            bytes[250_000] ^= 0x01
            return bytes
        }()
        try await store.withLiveServer { client in
            // Given an upload whose first PATCH carries the first 100,000 bytes only (its body complete)
            let location = try await Self.create(client, length: photo.count, sha256: sha)
            let first = try await Self.patch(client, location, offset: 0, photo.prefix(100_000))
            #expect(first.status == .noContent && first.header("Upload-Offset") == "100000", "\(first.bodyString)")
            #expect(try await Self.offset(client, location) == (.ok, 100_000))
            // When the rest arrives with one byte flipped
            let rest = try await Self.patch(client, location, offset: 100_000, damaged.suffix(from: 100_000))
            // Then the whole file, hashed from disk, does not match: 422, the upload deleted, nothing stored
            #expect(rest.status == .unprocessableContent && rest.bodyString.contains("attachmentMismatch"))
            #expect(try await Self.offset(client, location).0 == .notFound)
            #expect(try await client.execute(uri: AttachmentRouteTests.uri(sha), method: .get).status == .notFound)
            // And the same upload again, undamaged, in two PATCHes is stored
            let again = try await Self.create(client, length: photo.count, sha256: sha)
            #expect(try await Self.patch(client, again, offset: 0, photo.prefix(1)).status == .noContent)
            let done = try await Self.patch(client, again, offset: 1, photo.suffix(from: 1))
            #expect(done.status == .noContent && done.header("Upload-Offset") == String(photo.count))
            let get = try await client.execute(uri: AttachmentRouteTests.uri(sha), method: .get)
            #expect(get.status == .ok && get.bodyData == photo)
        }
        #expect(AttachmentRouteTests.files(under: store.store.root.appendingPathComponent(".ferry-uploads")).isEmpty)
    }
}
