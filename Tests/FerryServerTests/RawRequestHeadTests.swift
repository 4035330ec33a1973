import HTTPTypes
import NIOCore
import Testing

@testable import FerryServer

/// The strict subset of HTTP/1.1 that RawNotModifiedHandler reads; everything else is left to the HTTP decoder.
@Suite struct RawRequestHeadTests {
    static func parse(_ text: String, limit: Int = 80 * 1024) -> RawRequestHead? {
        Array(text.utf8).withUnsafeBytes { RawRequestHead.parse($0, maxHeadBytes: limit) }
    }

    static let tag = "\"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\""

    @Test func readsASimpleConditionalRequest() throws {
        let text =
            "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nIf-None-Match:  \(Self.tag) \t\r\nuser-agent: wrk\r\n\r\n"
        let head = try #require(Self.parse(text + "GET /next"))
        #expect(head.length == text.utf8.count)
        #expect(head.request.method == .get && head.request.path == "/v1/datasets/trips/snapshot")
        #expect(head.request.authority == "127.0.0.1:8080")
        #expect(head.request.headerFields[.ifNoneMatch] == Self.tag)
        #expect(head.request.headerFields[.userAgent] == "wrk")
        #expect(head.request.headerFields[HTTPField.Name("Host")!] == nil)  // the authority, as NIO's conversion has it
        let headRequest = try #require(Self.parse("HEAD /v1/datasets/trips/versions/3 HTTP/1.1\r\n\r\n"))
        #expect(headRequest.request.method == .head && headRequest.request.headerFields.isEmpty)
    }

    @Test(arguments: [
        "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nIf-None-Match: *\r\n",  // incomplete
        "GET /v1/datasets/trips/snapshot HTTP/1.0\r\n\r\n",
        "get /v1/datasets/trips/snapshot HTTP/1.1\r\n\r\n",
        "POST /v1/datasets/trips/snapshot HTTP/1.1\r\n\r\n",
        "GET /v1/datasets/trips/snapshot?checksum=abc HTTP/1.1\r\n\r\n",
        "GET /v1/datasets/trips/manifest?schema= HTTP/1.1\r\n\r\n",
        "GET /v1/datasets/trips/manifest?schema=1&x=2 HTTP/1.1\r\n\r\n",
        "GET /v1/datasets/trips/manifest?schema=1 2 HTTP/1.1\r\n\r\n",
        "GET /v1/datasets/tr%69ps/snapshot HTTP/1.1\r\n\r\n",
        "GET /v1/datasets/Trips/snapshot HTTP/1.1\r\n\r\n",
        "GET http://x/v1/datasets/trips/snapshot HTTP/1.1\r\n\r\n",
        "GET  /v1/datasets/trips/snapshot HTTP/1.1\r\n\r\n",
        "GET /v1/datasets/trips/snapshot HTTP/1.1\n\n",
        "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nIf-None-Match: *\n\r\n",
        "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nIf-None-Match: *\r\n continued\r\n\r\n",  // obs-fold
        "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nIf-None-Match : *\r\n\r\n",
        "GET /v1/datasets/trips/snapshot HTTP/1.1\r\n: *\r\n\r\n",
        "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nIf-None-Match: \"a\"\r\nif-none-match: \"b\"\r\n\r\n",
        "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nX-Name: caf\u{e9}\r\n\r\n",
        "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nX-Name: a\u{0}b\r\n\r\n",
        "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nX-Name: a\rb\r\n\r\n",
    ])
    func leavesEverythingElseToTheDecoder(_ text: String) {
        #expect(Self.parse(text) == nil)
    }

    @Test func takesSchemaLineNamesAndTheAcceptedSchemaQuery() throws {
        let line = try #require(Self.parse("GET /v1/datasets/trips.v2/manifest HTTP/1.1\r\n\r\n"))
        #expect(line.request.path == "/v1/datasets/trips.v2/manifest")
        let query = try #require(Self.parse("GET /v1/datasets/trips/manifest?schema=1,2 HTTP/1.1\r\n\r\n"))
        #expect(query.request.path == "/v1/datasets/trips/manifest?schema=1,2")
        // The revalidator then takes each part only in its valid form: the query on a manifest only, and a list of
        // positive numbers.
        #expect(ChannelRevalidator.parse("/v1/datasets/trips/manifest?schema=1,2")?.accepted == [1, 2])
        #expect(ChannelRevalidator.parse("/v1/datasets/trips.v2/manifest")?.dataset == "trips.v2")
        #expect(ChannelRevalidator.parse("/v1/datasets/trips/snapshot?schema=1") == nil)
        #expect(ChannelRevalidator.parse("/v1/datasets/trips/manifest?schema=0,1") == nil)
        #expect(ChannelRevalidator.parse("/v1/datasets/trips/manifest?schema=1,,2") == nil)
        #expect(ChannelRevalidator.parse("/v1/datasets/../manifest") == nil)
        #expect(ChannelRevalidator.parse("/v1/datasets/trips.v0/manifest") == nil)
    }

    @Test func staysWithinTheLimits() {
        let fields = (0..<64).map { "X-\($0): v\r\n" }.joined()
        #expect(Self.parse("GET / HTTP/1.1\r\n\(fields)\r\n") != nil)
        #expect(Self.parse("GET / HTTP/1.1\r\n\(fields)X-64: v\r\n\r\n") == nil)
        let text = "GET / HTTP/1.1\r\nX-Long: \(String(repeating: "a", count: 100))\r\n\r\n"
        #expect(Self.parse(text, limit: text.utf8.count) != nil)
        #expect(Self.parse(text, limit: text.utf8.count - 1) == nil)
    }

    @Test("the memo finds a head's end within the limit only, and stays bounded")
    func memoHeadLengthAndCapacity() {
        func length(_ text: String, limit: Int = 1000) -> Int? {
            Array(text.utf8).withUnsafeBytes { RevalidationMemo.headLength($0, limit: limit) }
        }
        let head = "GET /v1/datasets/t/snapshot HTTP/1.1\r\nIf-None-Match: *\r\n\r\n"
        #expect(length(head) == head.utf8.count)
        #expect(length(head + "GET /next") == head.utf8.count)  // a pipelined request after it is not part of it
        #expect(length(head, limit: head.utf8.count - 1) == nil)
        #expect(length("GET / HTTP/1.1\r\n") == nil && length("\r\n\r") == nil && length("") == nil)
        #expect(length("GET / HTTP/1.1\n\n") == nil)  // bare LF is not a head's end here

        let memo = RevalidationMemo()
        final class View: Sendable {}
        let view = View()
        for i in 0...RevalidationMemo.capacity {
            memo.remember(
                ByteBuffer(string: "head \(i)"),
                .init(dataset: "t", view: view, route: .snapshot, prefix: ByteBuffer(), line: ""))
        }
        #expect(memo.count == 1)  // full at `capacity`, emptied, then the last one added
    }
}
