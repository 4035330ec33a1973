import FerryCore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import FerryServer

/// What the fuzzer (scripts/fuzz, schemathesis over openapi.yaml) throws at the attachment routes, by hand: every
/// malformed path, method and header is a 4xx, never a 5xx.
@Suite struct AttachmentGarbageTests {
    @Test("malformed attachment and upload requests are answered 4xx, never 5xx")
    func garbageIs4xx() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        let sha = String(repeating: "c", count: 64)
        let id = String(repeating: "d", count: 32)
        let base = "/v1/datasets/trips/attachments"
        let paths = [
            "\(base)/\(sha)", "\(base)/uploads", "\(base)/uploads/\(id)", "\(base)/x", "\(base)/uploads/x",
            "\(base)/\(sha.uppercased())", "/v1/datasets/Bad!/attachments/\(sha)",
            "/v1/datasets/nope/attachments/uploads",
        ]
        let methods: [HTTPRequest.Method] = [.get, .head, .put, .post, .patch, .delete, .options]
        let tus = HTTPField.Name("Tus-Resumable")!
        let length = HTTPField.Name("Upload-Length")!
        let offset = HTTPField.Name("Upload-Offset")!
        let metadata = HTTPField.Name("Upload-Metadata")!
        let headerSets: [HTTPFields] = [
            [:],
            [tus: "1.0.0"],
            [tus: "1.0.0", length: "-1", metadata: "sha256"],
            [tus: "1.0.0", length: "99999999999999999999", metadata: "sha256 \(Data(sha.utf8).base64EncodedString())"],
            [tus: "1.0.0", length: "5", metadata: "sha256 \(Data(sha.utf8).base64EncodedString()),sha256 eA=="],
            [tus: "1.0.0", length: "5", metadata: " , a b c,ü x"],
            [tus: "1.0.0", offset: "-1", .contentType: "application/offset+octet-stream"],
            [tus: "1.0.0", offset: "99999999999999999999", .contentType: "application/offset+octet-stream"],
            [.contentType: "\u{7f}/x", .range: "bytes=9-1", .ifNoneMatch: "garbage", .ifRange: "W/\"x\""],
            [.authorization: "Bearer !!!", .contentType: ";"],
        ]
        try await store.withLiveServer { client in
            for path in paths {
                for method in methods {
                    for headers in headerSets {
                        let body: ByteBuffer? = method == .get || method == .head ? nil : ByteBuffer(string: "hello")
                        let response = try await client.execute(uri: path, method: method, headers: headers, body: body)
                        #expect(
                            (200..<500).contains(response.status.code),
                            "\(method) \(path) \(headers): \(response.status) \(response.bodyString)")
                    }
                }
            }
        }
    }
}
