import FerryCore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@testable import FerryServer

#if canImport(Glibc)
    import Glibc
#endif

/// Plain `GET`s of whole snapshot and version files are sent from the channel with `sendfile`
/// (`RawNotModifiedHandler`): the same status, fields and bytes as the route's chunks, counted the same way, and
/// everything else (ranges, conditions, scoped datasets, a second request pipelined behind a file) still reaches the
/// router. Each case runs against two live servers on the same store: one sending files from the channel, one
/// sending everything through the router.
@Suite struct SendfileDownloadTests {
    /// Files the channel sent, and their bytes.
    final class Sent: Sendable {
        private let files = Locked<[Int64?]>([])
        var all: [Int64?] { files.current }
        func add(_ bytes: Int64?) { files.withLock { $0.append(bytes) } }
    }

    struct Answer: Equatable, CustomStringConvertible {
        let status: Int
        /// Header lines as sent, in order, without Date.
        let fields: [String]
        let body: [UInt8]
        var description: String { "\(status) \(fields) \(body.count) bytes" }
    }

    /// One request on a fresh connection; the whole answer (the body by its Content-Length).
    static func fetch(_ port: Int, _ path: String, _ headers: [(String, String)] = []) async throws -> Answer {
        try await offPool {
            let connection = try RawHTTPConnection(port: port)
            connection.setTimeouts(seconds: 10)
            var request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            for (name, value) in headers { request += "\(name): \(value)\r\n" }
            try connection.send(request + "\r\n")
            return try readAnswer(connection)
        }
    }

    static func readAnswer(_ connection: RawHTTPConnection) throws -> Answer {
        var lines = try connection.readHeadLines()
        let status = Int(lines.removeFirst().split(separator: " ")[1]) ?? 0
        #expect(RevalidationTests.isIMFDate(lines.first { $0.hasPrefix("Date: ") }), "\(lines)")
        let length =
            lines.first { $0.lowercased().hasPrefix("content-length:") }.flatMap {
                Int($0.split(separator: " ").last ?? "")
            } ?? 0
        return Answer(
            status: status, fields: lines.filter { !$0.hasPrefix("Date: ") }, body: try connection.read(length))
    }

    /// Starts the two servers on `store` and runs `body` with their ports and what the channel sent.
    static func withServers(
        _ store: TestStore, idleTimeout: Duration? = .seconds(60),
        _ body: @Sendable (_ channel: Int, _ router: Int, _ sent: Sent) async throws -> Void
    ) async throws {
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let sent = Sent()
        var inChannel = store.configuration()
        inChannel.idleTimeout = idleTimeout
        inChannel.channelRevalidation.onDownload = { sent.add($0) }
        var throughRouter = store.configuration()
        throughRouter.channelRevalidation.enabled = false
        let first = try await buildApplication(inChannel, logger: logger)
        let second = try await buildApplication(throughRouter, logger: logger)
        try await first.test(.live) { channelClient in
            try await second.test(.live) { routerClient in
                try await body(try #require(channelClient.port), try #require(routerClient.port), sent)
            }
        }
    }

    @Test(
        "a whole snapshot or version, identity or gzip, has the route's status, fields and bytes, and is counted as the route counts it"
    )
    func sameAnswerAsTheRoute() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish(rows: 50, blobBytes: 300 * 1024)
        try store.publish(rows: 60, blobBytes: 700 * 1024)
        let files = [
            ("/v1/datasets/trips/snapshot", [(String, String)](), try store.snapshotBytes(version: 2)),
            ("/v1/datasets/trips/snapshot", [("Accept-Encoding", "gzip")], try store.gzipBytes(version: 2)),
            ("/v1/datasets/trips/versions/1", [], try store.snapshotBytes(version: 1)),
            (
                "/v1/datasets/trips/versions/1", [("Accept-Encoding", "br, gzip;q=0.5"), ("Connection", "keep-alive")],
                try store.gzipBytes(version: 1)
            ),
        ]
        try await Self.withServers(store) { channel, router, sent in
            for (path, headers, expected) in files {
                let fromChannel = try await Self.fetch(channel, path, headers)
                let fromRouter = try await Self.fetch(router, path, headers)
                #expect(fromChannel.status == 200)
                #expect(fromChannel == fromRouter, "\(path) \(headers)")
                #expect(fromChannel.body == [UInt8](expected))
            }
            // Every one of them went out from the channel, whole.
            #expect(sent.all == files.map { Int64($0.2.count) })
            // The metrics count each request and its bytes under the route, as the router's server does.
            let channelMetrics = try await RevalidationTests.body(channel, "/metrics")
            let routerMetrics = try await RevalidationTests.body(router, "/metrics")
            for pattern in ["/v1/datasets/{dataset}/snapshot", "/v1/datasets/{dataset}/versions/{version}"] {
                for name in [
                    "ferry_http_requests_total{route=\"\(pattern)\",status=\"200\"}",
                    "ferry_http_response_bytes_total{route=\"\(pattern)\"}",
                ] {
                    let line = try #require(
                        routerMetrics.split(separator: "\n").first { $0.hasPrefix(name) }, "\(name)")
                    #expect(channelMetrics.split(separator: "\n").contains(line), "\(line)")
                }
            }
        }
    }

    @Test(
        "ranges, conditions, a checksum query, Connection: close and unknown versions are the router's, answered alike")
    func everythingElseReachesTheRouter() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish(rows: 50, blobBytes: 200 * 1024)
        let sha = manifest.current.sha256
        let cases: [(String, [(String, String)])] = [
            ("/v1/datasets/trips/snapshot", [("Range", "bytes=100-199")]),
            ("/v1/datasets/trips/snapshot", [("Range", "bytes=100-"), ("If-Range", "\"\(sha)\"")]),
            ("/v1/datasets/trips/snapshot", [("If-None-Match", "\"\(String(repeating: "0", count: 64))\"")]),
            ("/v1/datasets/trips/snapshot", [("Connection", "close")]),
            ("/v1/datasets/trips/versions/9", []),
            ("/v1/datasets/nope/snapshot", []),
            ("/v1/datasets/trips/snapshot?checksum=\(sha)", []),
        ]
        try await Self.withServers(store) { channel, router, sent in
            for (path, headers) in cases {
                let fromChannel = try await Self.fetch(channel, path, headers)
                let fromRouter = try await Self.fetch(router, path, headers)
                #expect(fromChannel == fromRouter, "\(path) \(headers)")
            }
            #expect(sent.all.isEmpty, "sent from the channel: \(sent.all)")
        }
    }

    @Test("a request pipelined behind a file is answered after it, in order, by the router")
    func pipelinedBehindAFile() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish(rows: 50, blobBytes: 2 << 20)
        try store.publish(rows: 10)
        let big = try store.snapshotBytes(version: 1)
        let small = try store.snapshotBytes(version: 2)
        try await Self.withServers(store) { channel, _, sent in
            let answers = try await offPool {
                let connection = try RawHTTPConnection(port: channel)
                connection.setTimeouts(seconds: 10)
                let get = { (path: String) in "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" }
                try connection.send(
                    get("/v1/datasets/trips/versions/1") + get("/v1/datasets/trips/versions/2")
                        + get("/v1/datasets/trips/manifest"))
                return try (0..<3).map { _ in try Self.readAnswer(connection) }
            }
            #expect(answers.map(\.status) == [200, 200, 200])
            #expect(answers[0].body == [UInt8](big))
            #expect(answers[1].body == [UInt8](small))
            #expect(answers[2].fields.contains("Content-Type: application/json"), "\(answers[2])")
            // Only the first went out from the channel: one file at a time per connection.
            #expect(sent.all == [Int64(big.count)])
        }
    }

    @Test("a reader slower than the idle timeout still gets the whole file, and the connection then idles out")
    func aSlowReaderIsNotIdle() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish(rows: 10, blobBytes: 8 << 20)
        let expected = try store.snapshotBytes(version: 1)
        try await Self.withServers(store, idleTimeout: .milliseconds(300)) { channel, _, sent in
            let (answer, closedAfter) = try await offPool {
                let connection = try RawHTTPConnection(port: channel)
                connection.setTimeouts(seconds: 10)
                try connection.send("GET /v1/datasets/trips/snapshot HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                // Read nothing for three idle timeouts: the socket buffers fill and the file waits half sent.
                Thread.sleep(forTimeInterval: 0.9)
                let answer = try Self.readAnswer(connection)
                // Then nothing is in flight: the idle timeout closes the connection.
                let closed = connection.isReadable(milliseconds: 3000) && ((try? connection.readToEnd()) ?? [1]).isEmpty
                return (answer, closed)
            }
            #expect(answer.status == 200)
            #expect(answer.body == [UInt8](expected))
            #expect(closedAfter)
            #expect(sent.all == [Int64(expected.count)])
        }
    }

    @Test("a graceful shutdown waits for a file being sent")
    func shutdownWaitsForTheFile() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish(rows: 10, blobBytes: 8 << 20)
        let expected = try store.snapshotBytes(version: 1)
        let sent = Sent()
        var configuration = store.configuration()
        configuration.channelRevalidation.onDownload = { sent.add($0) }
        let received = Locked<Result<Answer, any Error>?>(nil)
        try await store.withLiveServer(configuration) { client in
            let port = try #require(client.port)
            try await offPool {
                let connection = try RawHTTPConnection(port: port)
                connection.setTimeouts(seconds: 10)
                try connection.send("GET /v1/datasets/trips/snapshot HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                // The server starts sending (the head arrives), then the reader pauses while the server shuts down.
                #expect(connection.isReadable(milliseconds: 5000))
                Thread.detachNewThread {
                    Thread.sleep(forTimeInterval: 0.5)
                    received.withLock { $0 = Result { try Self.readAnswer(connection) } }
                }
            }
        }  // the server shuts down here, gracefully, with the file half sent
        for _ in 0..<100 where received.current == nil { try await Task.sleep(for: .milliseconds(100)) }
        let answer = try #require(received.current).get()
        #expect(answer.status == 200)
        #expect(answer.body == [UInt8](expected))
        #expect(sent.all == [Int64(expected.count)])
    }

    @Test("a file truncated in place while it is sent closes the connection instead of leaving sendfile retrying")
    func aTruncatedFileClosesTheConnection() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish(rows: 10, blobBytes: 8 << 20)
        let path = try store.store.snapshotURL(dataset: "trips", version: 1).path
        try await Self.withServers(store) { channel, _, sent in
            let received = try await offPool { () -> Int in
                let connection = try RawHTTPConnection(port: channel)
                connection.setTimeouts(seconds: 10)
                try connection.send("GET /v1/datasets/trips/snapshot HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                #expect(connection.isReadable(milliseconds: 5000))
                // The reader stalls with most of the file unsent; the file loses its tail meanwhile.
                #expect(truncate(path, 1 << 20) == 0)
                Thread.sleep(forTimeInterval: 2.5)
                _ = try connection.readHeadLines()
                return (try? connection.readToEnd())?.count ?? 0
            }
            #expect(received < 8 << 20)
            #expect(sent.all.count == 1 && sent.all[0] == nil, "\(sent.all)")
        }
    }
}
