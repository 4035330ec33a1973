import FerryCore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import FerryServer

/// A public attachment the route served once is then sent from the channel with `sendfile`, with the route's very
/// status, fields and bytes; a range or a revalidation still goes to the router.
@Suite struct AttachmentSendfileTests {
    @Test("the second plain GET of a public attachment is sent from the channel, byte for byte as the route's")
    func sentFromTheChannel() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        let photo = AttachmentRouteTests.bytes(1_500_000)
        let sha = sha256Hex(photo)
        let sent = SendfileDownloadTests.Sent()
        var configuration = store.configuration()
        configuration.channelRevalidation.onDownload = { sent.add($0) }
        try await store.withLiveServer(configuration) { client in
            let put = try await client.execute(
                uri: AttachmentRouteTests.uri(sha), method: .put, headers: [.contentType: "image/jpeg"],
                body: ByteBuffer(bytes: photo))
            #expect(put.status == .created)
            let port = try #require(client.port)
            let answers = try await offPool { () -> [SendfileDownloadTests.Answer] in
                var answers: [SendfileDownloadTests.Answer] = []
                for _ in 0..<2 {
                    // A connection each: once the router has had a connection, it keeps it.
                    let connection = try RawHTTPConnection(port: port)
                    connection.setTimeouts(seconds: 10)
                    try connection.send("GET \(AttachmentRouteTests.uri(sha)) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    answers.append(try SendfileDownloadTests.readAnswer(connection))
                }
                return answers
            }
            // The first through the router, the second from the channel: the same answer.
            #expect(answers[0].status == 200 && answers[0].body == [UInt8](photo))
            #expect(answers[1] == answers[0])
            #expect(sent.all == [Int64(photo.count)])
            // A range still goes to the router.
            let range = try await client.execute(
                uri: AttachmentRouteTests.uri(sha), method: .get, headers: [.range: "bytes=0-9"])
            #expect(range.status == .partialContent && range.bodyData == photo.prefix(10))
            #expect(sent.all.count == 1)
        }
    }
}
