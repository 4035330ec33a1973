import FerryCore
import Foundation
import HummingbirdTesting
import Testing

@testable import FerryServer

/// Attachments behind deploy/nginx/ferry.conf (Debian's nginx, as shipped): uploads pass through, a public
/// attachment's GET is answered from the cache the second time, byte for byte.
@Suite struct AttachmentNginxTests {
    @Test("behind nginx: a PUT streams through to the replica, and a public attachment's second GET is a cache HIT")
    func cachedBehindNginx() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        let photo = AttachmentRouteTests.bytes(2_000_000)
        let sha = sha256Hex(photo)
        try await store.withLiveServer { client in
            let port = try #require(client.port)
            let nginx = try await offCooperativePool { try NginxInFront(of: port) }
            defer { nginx.stop() }
            let url = "http://127.0.0.1:\(nginx.port)" + AttachmentRouteTests.uri(sha)
            let put = try await StatusBrowserTests.request(url, method: "PUT", body: photo)
            #expect(put.status == 201, "\(String(decoding: put.body, as: UTF8.self))")
            let first = try await StatusBrowserTests.request(url)
            #expect(first.status == 200 && first.body == photo)
            #expect(first.header("X-Cache-Status") == "MISS")
            let second = try await StatusBrowserTests.request(url)
            #expect(second.status == 200 && second.body == photo)
            #expect(second.header("X-Cache-Status") == "HIT")
            #expect(second.header("ETag") == "\"\(sha)\"")
            // A tus request passes through, never cached.
            let options = try await StatusBrowserTests.request(
                "http://127.0.0.1:\(nginx.port)/v1/datasets/trips/attachments/uploads", method: "OPTIONS")
            #expect(options.status == 204 && options.header("Tus-Version") == "1.0.0")
        }
    }
}
