import FerryCore
import FerryPostgres
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Testing

@testable import FerryServer

/// Every GET and HEAD of a read URL gets the same bytes (status line, header fields in order, body; only the `Date`
/// value may differ) from each layer that can answer it: `RawNotModifiedHandler` before the HTTP decoder, the path
/// after the decoder (a connection whose first request the raw handler left to it), and the router, on plain HTTP
/// and behind TLS, one request per connection or pipelined. Table-driven: every URL kind (manifest, latest snapshot,
/// version, patch, object; a public and a scoped dataset) crossed with every request shape (plain, HEAD,
/// `If-None-Match` exact, list, weak and `*`, `?checksum=`, `Range`, `If-Range`, `Accept-Encoding` gzip and
/// identity). `ReadAnswer.decide` decides them all; a field one layer adds and another does not fails here.
@Suite struct LayerEquivalenceTests {
    /// A request as a table row: a URL and a shape.
    struct Row: CustomStringConvertible {
        let method: String
        let target: String
        let headers: [(String, String)]

        var description: String { "\(method) \(target) \(headers.map { "\($0.0): \($0.1)" })" }

        var text: String {
            var text = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            for (name, value) in headers { text += "\(name): \(value)\r\n" }
            return text + "\r\n"
        }
    }

    /// The four servers on one store: answering in the channel or only in the router, on plain HTTP and on HTTPS.
    struct Servers: Sendable {
        let fast: Int
        let router: Int
        let fastTLS: Int
        let routerTLS: Int
    }

    static let zeros = String(repeating: "0", count: 64)
    static let stale = "\"\(zeros)\""

    /// Every request shape for a URL whose answer has ETag `tag` (identity) and `gzipTag` (with `Accept-Encoding:
    /// gzip`; the same tag where there is no gzip copy).
    static func shapes(_ path: String, tag: String, gzipTag: String, extra: [(String, String)]) -> [Row] {
        let sha = tag.replacingOccurrences(of: "\"", with: "").replacingOccurrences(of: "-gzip", with: "")
        let rows: [(String, String, [(String, String)])] = [
            ("GET", "", []),
            ("HEAD", "", []),
            ("GET", "", [("If-None-Match", tag)]),
            ("HEAD", "", [("If-None-Match", tag)]),
            ("GET", "", [("If-None-Match", "\(stale), \(tag)")]),
            ("GET", "", [("If-None-Match", "W/\(tag)")]),
            ("GET", "", [("If-None-Match", "*")]),
            ("HEAD", "", [("If-None-Match", "*")]),
            ("GET", "", [("If-None-Match", stale)]),
            ("GET", "", [("If-None-Match", "\"\(zeros)")]),  // malformed: ignored
            ("GET", "", [("If-None-Match", gzipTag), ("Accept-Encoding", "gzip")]),
            ("GET", "", [("If-None-Match", gzipTag), ("Accept-Encoding", "identity")]),
            ("GET", "", [("If-None-Match", tag), ("Accept-Encoding", "gzip")]),
            ("GET", "", [("If-None-Match", "*"), ("Accept-Encoding", "gzip"), ("Range", "bytes=0-9")]),
            ("GET", "?checksum=\(sha)", []),
            ("HEAD", "?checksum=\(sha)", []),
            ("GET", "?checksum=\(zeros)", []),
            ("GET", "?checksum=abc", []),
            ("GET", "?checksum=\(zeros)", [("If-None-Match", tag)]),
            ("GET", "", [("Range", "bytes=0-9")]),
            ("GET", "", [("Range", "bytes=-5")]),
            ("GET", "", [("Range", "bytes=999999999-")]),
            ("GET", "", [("Range", "bytes=0-9"), ("If-Range", tag)]),
            ("GET", "", [("Range", "bytes=0-9"), ("If-Range", stale)]),
            ("GET", "", [("Range", "bytes=0-9"), ("If-Range", gzipTag), ("Accept-Encoding", "gzip")]),
            ("HEAD", "", [("Range", "bytes=0-9")]),
            ("GET", "", [("Accept-Encoding", "gzip")]),
            ("HEAD", "", [("Accept-Encoding", "gzip")]),
            ("GET", "", [("Accept-Encoding", "gzip;q=0, identity")]),
            ("GET", "", [("Accept-Encoding", "identity")]),
            ("GET", "", [("Connection", "keep-alive"), ("If-None-Match", tag)]),
        ]
        return rows.map { Row(method: $0.0, target: path + $0.1, headers: extra + $0.2) }
    }

    /// Rows whose URL names nothing the dataset has, or is malformed: the router's errors, on every layer.
    static func errorRows(_ base: String, extra: [(String, String)]) -> [Row] {
        let paths = [
            "\(base)/versions/999", "\(base)/versions/01", "\(base)/patches/2-1", "\(base)/patches/1-999",
            "\(base)/objects/\(zeros).sqlite", "\(base)/objects/nope", "/v1/datasets/nope/snapshot",
            "/v1/datasets/nope/manifest",
        ]
        return paths.flatMap { path in
            [
                Row(method: "GET", target: path, headers: extra),
                Row(method: "GET", target: path, headers: extra + [("If-None-Match", "*")]),
                Row(method: "HEAD", target: path, headers: extra + [("If-None-Match", "*")]),
            ]
        }
    }

    /// The rows for every path of `paths`, with each path's tags read from the router.
    static func rows(_ paths: [String], servers: Servers, extra: [(String, String)]) async throws -> [Row] {
        var rows: [Row] = []
        for path in paths {
            let head = Row(method: "HEAD", target: path, headers: extra)
            let gzipHead = Row(method: "HEAD", target: path, headers: extra + [("Accept-Encoding", "gzip")])
            let tag = try #require(Self.etag(try await Self.exchange(servers.router, tls: false, [head]).first))
            let gzipTag = try #require(Self.etag(try await Self.exchange(servers.router, tls: false, [gzipHead]).first))
            rows += Self.shapes(path, tag: tag, gzipTag: gzipTag, extra: extra)
        }
        return rows
    }

    static func etag(_ response: [UInt8]?) -> String? {
        guard let response else { return nil }
        let text = String(decoding: response, as: UTF8.self)
        return text.components(separatedBy: "\r\n").first { $0.lowercased().hasPrefix("etag: ") }.map {
            String($0.dropFirst(6))
        }
    }

    /// Sends `row` to every layer and expects the router's bytes from each.
    static func check(_ row: Row, _ servers: Servers) async throws {
        let primer = Row(method: "GET", target: "/healthz", headers: [])
        // The router, on plain HTTP: the reference
        async let routed = Self.exchange(servers.router, tls: false, [row])
        // The channel: first on its connection (RawNotModifiedHandler), two pipelined in one write, after the
        // decoder took the connection (a first request the raw handler leaves to it), and behind TLS
        async let raw = Self.exchange(servers.fast, tls: false, [row])
        async let pipelined = Self.exchange(servers.fast, tls: false, [row, row])
        async let decoded = Self.exchange(servers.fast, tls: false, [primer], then: [row, row])
        async let rawTLS = Self.exchange(servers.fastTLS, tls: true, [row])
        async let pipelinedTLS = Self.exchange(servers.fastTLS, tls: true, [row, row])
        async let routedTLS = Self.exchange(servers.routerTLS, tls: true, [row])
        let reference = try #require(try await routed.first)
        let answers: [(String, [[UInt8]])] = [
            ("before the decoder", try await raw), ("pipelined", try await pipelined),
            ("after the decoder", Array(try await decoded.dropFirst())), ("TLS", try await rawTLS),
            ("TLS pipelined", try await pipelinedTLS), ("TLS router", try await routedTLS),
        ]
        for (layer, responses) in answers {
            for response in responses {
                let same = response == reference
                #expect(
                    same,
                    "\(row) \(layer):\n\(Self.show(response))\nthe router:\n\(Self.show(reference))")
            }
        }
    }

    /// The response's head as text, for a failure message.
    static func show(_ response: [UInt8]) -> String {
        let text = String(decoding: response, as: UTF8.self)
        return String(text.prefix { $0 != "\u{0}" }.components(separatedBy: "\r\n\r\n").first ?? "")
    }

    static let clientTLS: NIOSSLContext = {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.certificateVerification = .none
        // The fixtures' key is valid; a failure here is a broken test set-up
        return try! NIOSSLContext(configuration: configuration)
    }()

    /// One connection: writes `rows` in one write and reads their responses, then writes `then` likewise. Each
    /// response is its bytes as received with the `Date` value blanked out.
    static func exchange(_ port: Int, tls: Bool, _ rows: [Row], then more: [Row] = []) async throws -> [[UInt8]] {
        try await withThrowingTaskGroup(of: [[UInt8]].self) { group in
            group.addTask {
                let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                    .connect(host: "127.0.0.1", port: port) { channel in
                        channel.eventLoop.makeCompletedFuture {
                            if tls {
                                try channel.pipeline.syncOperations.addHandler(
                                    NIOSSLClientHandler(context: Self.clientTLS, serverHostname: nil))
                            }
                            return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                        }
                    }
                return try await channel.executeThenClose { inbound, outbound in
                    var iterator = inbound.makeAsyncIterator()
                    var pending: [UInt8] = []
                    var responses: [[UInt8]] = []
                    for batch in [rows, more] where !batch.isEmpty {
                        try await outbound.write(ByteBuffer(string: batch.map(\.text).joined()))
                        for row in batch {
                            while true {
                                if let (response, used) = Self.response(in: pending, method: row.method) {
                                    responses.append(response)
                                    pending.removeFirst(used)
                                    break
                                }
                                guard let chunk = try await iterator.next() else {
                                    throw FerryError(.network, "the server closed after \(responses.count) responses")
                                }
                                pending += chunk.readableBytesView
                            }
                        }
                    }
                    return responses
                }
            }
            group.addTask {
                try await Task.sleep(for: .seconds(20))
                throw FerryError(.network, "no answer within 20 s")
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
    }

    /// The first whole response in `bytes` (its head, then `Content-Length` bytes of body unless a HEAD or a 304),
    /// with the `Date` value blanked out, and how many bytes it took.
    static func response(in bytes: [UInt8], method: String) -> (response: [UInt8], used: Int)? {
        guard bytes.count >= 4,
            let end = (0...(bytes.count - 4)).first(where: {
                bytes[$0] == 13 && bytes[$0 + 1] == 10 && bytes[$0 + 2] == 13 && bytes[$0 + 3] == 10
            })
        else { return nil }
        let lines = String(decoding: bytes[..<end], as: UTF8.self).components(separatedBy: "\r\n")
        let status = lines.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
        let length =
            lines.first { $0.lowercased().hasPrefix("content-length:") }.flatMap {
                Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
            } ?? 0
        let bodyLength = method == "HEAD" || status == 304 ? 0 : length
        let used = end + 4 + bodyLength
        guard bytes.count >= used else { return nil }
        let head = lines.map { $0.lowercased().hasPrefix("date: ") ? "Date: <date>" : $0 }.joined(separator: "\r\n")
        return (Array(head.utf8) + [13, 10, 13, 10] + bytes[(end + 4)..<used], used)
    }

    /// Starts the four servers over `configuration()`'s store (`wiring()` for each), and runs `body` with them and
    /// the channel's answer and file counts (plain HTTP and TLS together).
    static func withServers(
        _ configuration: @Sendable () -> ServerConfiguration,
        wiring: @escaping @Sendable () async throws -> ServerWiring = { ServerWiring() },
        _ body: @Sendable (Servers, RevalidationTests.Answers, Locked<Int>) async throws -> Void
    ) async throws {
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let answers = RevalidationTests.Answers()
        let files = Locked(0)
        let fixtures = TestPaths.packageRoot.appendingPathComponent("Tests/Fixtures/tls")
        let tls = ServerConfiguration.TLSSettings(
            certificateChain: fixtures.appendingPathComponent("server.pem"),
            privateKey: fixtures.appendingPathComponent("server.key"))
        func make(channel: Bool, tls settings: ServerConfiguration.TLSSettings?) -> ServerConfiguration {
            var made = configuration()
            made.tls = settings
            made.channelRevalidation.enabled = channel
            made.channelRevalidation.onAnswer = { answers.add(remembered: $0) }
            made.channelRevalidation.onDownload = { _ in files.withLock { $0 += 1 } }
            return made
        }
        let fast = try await buildApplication(make(channel: true, tls: nil), logger: logger, wiring: try await wiring())
        let router = try await buildApplication(
            make(channel: false, tls: nil), logger: logger, wiring: try await wiring())
        let fastTLS = try await buildApplication(
            make(channel: true, tls: tls), logger: logger, wiring: try await wiring())
        let routerTLS = try await buildApplication(
            make(channel: false, tls: tls), logger: logger, wiring: try await wiring())
        try await fast.test(.live) { a in
            try await router.test(.live) { b in
                try await fastTLS.test(.live) { c in
                    try await routerTLS.test(.live) { d in
                        let servers = Servers(
                            fast: try #require(a.port), router: try #require(b.port), fastTLS: try #require(c.port),
                            routerTLS: try #require(d.port))
                        try await body(servers, answers, files)
                    }
                }
            }
        }
    }

    @Test("a public dataset: every layer sends the router's bytes, for every URL kind and request shape")
    func publicDataset() async throws {
        // Given versions 1 and 2 (each with its gzip copy) and a patch 1 → 2
        let (store, ref) = try PatchRouteTests.storeWithPatch()
        defer { store.remove() }
        let manifest = try store.store.requireManifest("trips")
        let v2 = try #require(manifest.scopes[0].retained.first { $0.version == 2 }).sha256
        let base = "/v1/datasets/trips"
        let paths = [
            "\(base)/manifest", "\(base)/snapshot", "\(base)/versions/1", "\(base)/versions/2",
            "\(base)/patches/1-2", "\(base)/objects/\(v2).sqlite", "\(base)/objects/\(v2).sqlite.gz",
            "\(base)/objects/\(ref.sha256).patch.gz",
        ]
        try await Self.withServers(store.configuration) { servers, answers, files in
            let rows = try await Self.rows(paths, servers: servers, extra: []) + Self.errorRows(base, extra: [])
            for row in rows { try await Self.check(row, servers) }
            // And the channel answered many of them itself: 304s (some remembered) and whole files
            #expect(answers.value > 100 && answers.remembered > 50 && files.current > 10)
            #expect(rows.count == 8 * 31 + 24)
        }
    }

    @Test("a scoped dataset: every layer sends the router's bytes, with a cached token, without one, with a bad one")
    func scopedDataset() async throws {
        let world = try ScopedServerTests.World.make("layers-scoped")
        defer { world.close() }
        try await world.publish()
        // A second version of Alice's scope (tier 0), for a patch
        try world.execute("UPDATE campgrounds SET name = name || ' (renamed)' WHERE tier = 0")
        try await world.publish()
        let settings = ServerConfiguration.DatabaseSettings(
            templatePaths: [URL(fileURLWithPath: world.template.path)], databaseURL: world.database.url)
        let root = world.store.root
        let configuration = { @Sendable in
            var configuration = ServerConfiguration(storePath: root, port: 0, pollInterval: .milliseconds(50))
            configuration.tokenCacheTTL = .seconds(600)
            configuration.database = settings
            return configuration
        }
        var log = Logger(label: "test")
        log.logLevel = .warning
        let logger = log
        let wiring: @Sendable () async throws -> ServerWiring = {
            try await ServerWiring.start(settings, logger: logger)
        }
        let alice = try #require(try world.scoped().entry(for: "0"))
        let base = "/v1/datasets/\(ScopedServerTests.dataset)"
        try await Self.withServers(configuration, wiring: wiring) { servers, answers, _ in
            let token = [("Authorization", "Bearer alice-token")]
            // Alice's manifest names her versions, their objects and patches
            let manifestRow = Row(method: "GET", target: "\(base)/manifest", headers: token)
            let manifestResponse = try #require(
                try await Self.exchange(servers.router, tls: false, [manifestRow]).first)
            let text = String(decoding: manifestResponse, as: UTF8.self)
            let json = Data(text.components(separatedBy: "\r\n\r\n").dropFirst().joined(separator: "\r\n\r\n").utf8)
            let manifest = try JSONDecoder().decode(Manifest.self, from: json)
            #expect(manifest.version == alice.version)
            let patches = (manifest.current.patches ?? []).map { "\(base)/patches/\($0.from)-\(manifest.version)" }
            #expect(!patches.isEmpty)
            let objects = ["\(alice.sha256).sqlite", "\(alice.sha256).sqlite.gz"].map { "\(base)/objects/\($0)" }
            let paths =
                ["\(base)/manifest", "\(base)/snapshot", "\(base)/versions/\(alice.version)"] + patches + objects
            // Each channel server has cached Alice's scope (its first request asked the token check)
            for port in [servers.fast, servers.fastTLS] {
                _ = try await Self.exchange(port, tls: port == servers.fastTLS, [manifestRow])
            }
            let before = answers.value
            var rows = try await Self.rows(paths, servers: servers, extra: token)
            rows += Self.errorRows(base, extra: token)
            // Without a token, with a malformed one, with an unknown one: 401 on every layer
            for extra in [[], [("Authorization", "Bearer bad token")], [("Authorization", "Bearer not-a-token")]] {
                rows += ["manifest", "snapshot", "versions/\(alice.version)"].flatMap {
                    [
                        Row(method: "GET", target: "\(base)/\($0)", headers: extra),
                        Row(method: "GET", target: "\(base)/\($0)", headers: extra + [("If-None-Match", "*")]),
                    ]
                }
            }
            for row in rows { try await Self.check(row, servers) }
            // And the channel answered Alice's revalidations itself (never from the memo: scoped answers are not
            // remembered)
            #expect(answers.value - before > 50)
        }
    }
}
