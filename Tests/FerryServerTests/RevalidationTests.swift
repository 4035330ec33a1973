import FerryCore
import FerryPostgres
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@testable import FerryServer

/// Conditional requests answered in the channel (`RawNotModifiedHandler`) answer exactly as the routes do, and
/// everything the channel cannot be certain about still reaches the router. Every case runs against two live
/// servers on the same store: one answering in the channel (counting its answers), one sending everything to the
/// router.
@Suite struct RevalidationTests {
    /// How many requests the channel answered.
    final class Answers: Sendable {
        private let count = Locked(0)
        private let rememberedCount = Locked(0)
        var value: Int { count.current }
        /// Answers that came from the memo of request heads (`RevalidationMemo`).
        var remembered: Int { rememberedCount.current }
        func add(remembered: Bool) {
            count.withLock { $0 += 1 }
            if remembered { rememberedCount.withLock { $0 += 1 } }
        }
    }

    struct Exchange: Equatable, CustomStringConvertible {
        let status: Int
        /// The header lines as sent, in order, without Date.
        let fields: [String]
        let date: String?

        var description: String { "\(status) \(fields)" }

        /// Status and fields; the Date may differ by a second.
        static func == (a: Exchange, b: Exchange) -> Bool { a.status == b.status && a.fields == b.fields }
    }

    /// One request on a fresh connection, read up to the end of the response head.
    static func exchange(
        _ port: Int, _ method: String = "GET", _ path: String, _ headers: [(String, String)] = [], body: String = ""
    ) async throws -> Exchange {
        try await offPool {
            let connection = try RawHTTPConnection(port: port)
            connection.setTimeouts(seconds: 30)
            var request = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            for (name, value) in headers { request += "\(name): \(value)\r\n" }
            try connection.send(request + "\r\n" + body)
            var lines = try connection.readHeadLines()
            let status = Int(lines.removeFirst().split(separator: " ")[1]) ?? 0
            let date = lines.first { $0.lowercased().hasPrefix("date:") }
            return Exchange(status: status, fields: lines.filter { !$0.lowercased().hasPrefix("date:") }, date: date)
        }
    }

    /// The body of a plain GET.
    static func body(_ port: Int, _ path: String) async throws -> String {
        try await offPool {
            let connection = try RawHTTPConnection(port: port)
            connection.setTimeouts(seconds: 30)
            try connection.send("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            let head = try connection.readHead()
            return String(decoding: try connection.read(Int(head.headers["content-length"] ?? "0") ?? 0), as: UTF8.self)
        }
    }

    /// Starts the two servers, each with its own `configuration()` (so each has its own metrics and status board), and
    /// runs `body` with their ports, the channel's answer count and the channel server's configuration.
    static func withServers(
        _ configuration: @Sendable () -> ServerConfiguration,
        wiring: @escaping @Sendable () async throws -> ServerWiring = { ServerWiring() },
        _ body:
            @Sendable (_ channel: Int, _ router: Int, _ answers: Answers, _ configuration: ServerConfiguration)
            async throws -> Void
    ) async throws {
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let answers = Answers()
        var inChannel = configuration()
        inChannel.channelRevalidation.onAnswer = { answers.add(remembered: $0) }
        var throughRouter = configuration()
        throughRouter.channelRevalidation.enabled = false
        let first = try await buildApplication(inChannel, logger: logger, wiring: try await wiring())
        let second = try await buildApplication(throughRouter, logger: logger, wiring: try await wiring())
        let channelConfiguration = inChannel
        try await first.test(.live) { channelClient in
            try await second.test(.live) { routerClient in
                try await body(
                    try #require(channelClient.port), try #require(routerClient.port), answers, channelConfiguration)
            }
        }
    }

    /// `Date: Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110 §5.6.7).
    static func isIMFDate(_ line: String?) -> Bool {
        guard let line, line.hasPrefix("Date: "), line.hasSuffix(" GMT") else { return false }
        let parts = line.dropFirst(6).split(separator: " ")
        return parts.count == 6 && ["Mon,", "Tue,", "Wed,", "Thu,", "Fri,", "Sat,", "Sun,"].contains(String(parts[0]))
            && parts[1].count == 2
            && ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].contains(
                String(parts[2]))
            && parts[3].count == 4 && parts[4].count == 8
    }

    @Test("the channel's 304 carries exactly the route's fields, for manifests, snapshots, versions and patches")
    func sameFieldsAsTheRoute() async throws {
        // Given versions 1 and 2 (each with its gzip copy) and a patch 1 → 2
        let (store, ref) = try PatchRouteTests.storeWithPatch()
        defer { store.remove() }
        let manifest = try store.store.requireManifest("trips")
        let v1 = try #require(manifest.scopes[0].retained.first { $0.version == 1 }).sha256
        let v2 = try #require(manifest.scopes[0].retained.first { $0.version == 2 }).sha256
        let base = "/v1/datasets/trips"
        let cases: [(String, String, [(String, String)])] = [
            ("GET", "\(base)/manifest", [("If-None-Match", "\"\(v2)\"")]),
            ("HEAD", "\(base)/manifest", [("If-None-Match", "\"\(v2)\"")]),
            ("GET", "\(base)/manifest", [("If-None-Match", "*")]),
            ("GET", "\(base)/manifest", [("If-None-Match", "\"\(v1)\", W/\"\(v2)\"")]),
            ("GET", "\(base)/snapshot", [("If-None-Match", "\"\(v2)\"")]),
            ("HEAD", "\(base)/snapshot", [("If-None-Match", "\"\(v2)\"")]),
            ("GET", "\(base)/snapshot", [("If-None-Match", "\"\(v2)-gzip\""), ("Accept-Encoding", "gzip")]),
            ("GET", "\(base)/snapshot", [("If-None-Match", "\"\(v2)\""), ("Accept-Encoding", "gzip")]),
            ("GET", "\(base)/snapshot", [("If-None-Match", "*"), ("Accept-Encoding", "gzip")]),
            ("GET", "\(base)/snapshot", [("If-None-Match", "*"), ("Accept-Encoding", "gzip"), ("Range", "bytes=0-9")]),
            ("GET", "\(base)/versions/1", [("If-None-Match", "\"\(v1)\"")]),
            ("GET", "\(base)/versions/2", [("If-None-Match", "W/\"\(v2)-gzip\""), ("Accept-Encoding", "gzip")]),
            ("HEAD", "\(base)/versions/1", [("If-None-Match", "\"\(v1)-gzip\"")]),
            ("GET", "\(base)/patches/1-2", [("If-None-Match", "\"\(ref.sha256)\"")]),
            ("HEAD", "\(base)/patches/1-2", [("If-None-Match", "*")]),
            ("GET", "\(base)/snapshot", [("If-None-Match", "\"\(v2)\""), ("Connection", "keep-alive")]),
        ]
        try await Self.withServers(store.configuration) { channel, router, answers, configuration in
            for (index, (method, path, headers)) in cases.enumerated() {
                // When the same conditional request goes to both servers
                let fast = try await Self.exchange(channel, method, path, headers)
                let routed = try await Self.exchange(router, method, path, headers)

                // Then the channel answered it, with the route's status and fields, in the same order, and a Date
                #expect(answers.value == 2 * index + 1, "\(method) \(path) \(headers)")
                #expect(
                    fast.status == 304 && fast == routed,
                    "\(method) \(path) \(headers): channel \(fast), route \(routed)")
                // And the same request again, byte for byte, is answered from memory, the same
                let again = try await Self.exchange(channel, method, path, headers)
                #expect(
                    again == routed && Self.isIMFDate(again.date) && answers.remembered == index + 1,
                    "\(method) \(path) \(headers): again \(again)")
                #expect(Self.isIMFDate(fast.date) && Self.isIMFDate(routed.date), "\(fast.date ?? "no Date")")
                let names = Set(fast.fields.map { $0.split(separator: ":")[0].lowercased() })
                #expect(
                    names
                        == (path.hasSuffix("manifest") || path.contains("patches")
                            ? ["etag", "cache-control"] : ["etag", "cache-control", "vary"]))
            }
            // And each answer was counted like the route's: the status page's traffic and the Prometheus counters
            let traffic = configuration.dependencies.statusBoard.traffic.window(endingAt: Date()).reduce(0) {
                $0 + $1.notModified
            }
            #expect(traffic == 2 * cases.count)
            let metrics = try await Self.body(channel, "/metrics")
            for (route, count) in [
                ("manifest", 8), ("snapshot", 14), ("versions/{version}", 6), ("patches/{patch}", 4),
            ] {
                let pattern = "/v1/datasets/{dataset}/\(route)"
                #expect(
                    metrics.contains(#"ferry_http_requests_total{route="\#(pattern)",status="304"} \#(count)"#),
                    "\(metrics)")
                #expect(metrics.contains(#"ferry_http_not_modified_total{route="\#(pattern)"} \#(count)"#))
            }
        }
    }

    @Test("what the channel cannot answer exactly goes to the router and is answered as before")
    func everythingElseReachesTheRouter() async throws {
        let (store, _) = try PatchRouteTests.storeWithPatch()
        defer { store.remove() }
        let manifest = try store.store.requireManifest("trips")
        let v2 = try #require(manifest.scopes[0].retained.first { $0.version == 2 }).sha256
        let stale = "\"\(String(repeating: "0", count: 64))\""
        let base = "/v1/datasets/trips"
        let cases: [(String, String, [(String, String)])] = [
            ("GET", "\(base)/snapshot", [("If-None-Match", stale)]),  // another ETag: the full body
            ("GET", "\(base)/manifest", [("If-None-Match", "\"\(v2)-gzip\"")]),  // the manifest's ETag has no -gzip
            ("GET", "\(base)/snapshot", []),  // unconditional
            ("GET", "\(base)/snapshot?checksum=\(v2)", [("If-None-Match", stale)]),  // a query: the router's
            // a malformed checksum is 400 first
            ("GET", "\(base)/snapshot?checksum=abc", [("If-None-Match", "\"\(v2)\"")]),
            ("GET", "/v1/datasets/nope/snapshot", [("If-None-Match", "\"\(v2)\"")]),  // unknown dataset: 404
            ("GET", "/v1/datasets/No!/snapshot", [("If-None-Match", "\"\(v2)\"")]),  // bad name: 400
            ("GET", "\(base)/versions/3", [("If-None-Match", "*")]),  // not retained: 404
            ("GET", "\(base)/versions/01", [("If-None-Match", "*")]),  // not canonical: 400
            ("GET", "\(base)/patches/2-1", [("If-None-Match", "*")]),  // malformed patch: 400
            ("GET", "\(base)/snapshot/", [("If-None-Match", "*")]),  // not a route as written
            ("POST", "\(base)/snapshot", [("If-None-Match", "*"), ("Content-Length", "0")]),  // 405
            ("GET", "\(base)/snapshot", [("If-None-Match", "*"), ("Content-Length", "2")]),  // a body
            // the router closes after it
            ("GET", "\(base)/snapshot", [("If-None-Match", "*"), ("Connection", "close")]),
            ("GET", "\(base)/snapshot", [("If-None-Match", "*"), ("Connection", "keep-alive, Upgrade")]),
        ]
        try await Self.withServers(store.configuration) { channel, router, answers, _ in
            for (method, path, headers) in cases {
                let body = headers.contains { $0 == ("Content-Length", "2") } ? "{}" : ""
                let fast = try await Self.exchange(channel, method, path, headers, body: body)
                let routed = try await Self.exchange(router, method, path, headers, body: body)
                #expect(fast == routed, "\(method) \(path) \(headers): channel \(fast), route \(routed)")
            }
            #expect(answers.value == 0)
        }
    }

    @Test(
        "once the HTTP decoder has read a connection, the router answers its revalidations, the same; pipelined requests in order"
    )
    func afterTheDecoderAndPipelined() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish()
        let conditional =
            "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"\(manifest.sha256)\"\r\n\r\n"
        let plain = "GET /v1/datasets/trips/manifest HTTP/1.1\r\nHost: x\r\n\r\n"
        try await Self.withServers(store.configuration) { channel, router, answers, _ in
            let routed = try await Self.exchange(
                router, "GET", "/v1/datasets/trips/snapshot", [("If-None-Match", "\"\(manifest.sha256)\"")])
            try await offPool {
                let connection = try RawHTTPConnection(port: channel)
                connection.setTimeouts(seconds: 30)
                // A plain GET goes to the decoder (and the router), then a revalidation on the same connection
                try connection.send(plain)
                let first = try connection.readHead()
                #expect(first.status == 200)
                _ = try connection.read(Int(first.headers["content-length"] ?? "0") ?? 0)
                try connection.send(conditional)
                var lines = try connection.readHeadLines()
                #expect(lines.removeFirst() == "HTTP/1.1 304 Not Modified")
                #expect(lines.filter { !$0.hasPrefix("Date:") } == routed.fields)
            }
            #expect(answers.value == 0)  // the router, after the decoder

            try await offPool {
                // Three requests in one write: the first answered before the decoder, the second and the third read
                // by it and answered by the router: in request order
                let connection = try RawHTTPConnection(port: channel)
                connection.setTimeouts(seconds: 30)
                try connection.send(conditional + plain + conditional)
                #expect(try connection.readHead().status == 304)
                let second = try connection.readHead()
                #expect(second.status == 200)
                let body = try connection.read(Int(second.headers["content-length"] ?? "0") ?? 0)
                #expect(String(decoding: body, as: UTF8.self).contains(manifest.sha256))
                var lines = try connection.readHeadLines()
                #expect(lines.removeFirst() == "HTTP/1.1 304 Not Modified")
                #expect(lines.filter { !$0.hasPrefix("Date:") } == routed.fields)
            }
            #expect(answers.value == 1)
        }
    }

    @Test("after a publish the channel answers with the new version's ETag at once; the old one gets the full body")
    func aNewPublishIsUsedAtOnce() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let first = try store.publish()
        try await Self.withServers(store.configuration) { channel, router, answers, _ in
            let old = [("If-None-Match", "\"\(first.sha256)\"")]
            #expect(try await Self.exchange(channel, "GET", "/v1/datasets/trips/snapshot", old).status == 304)
            #expect(try await Self.exchange(channel, "GET", "/v1/datasets/trips/snapshot", old).status == 304)
            #expect(answers.value == 2 && answers.remembered == 1)

            // When version 2 is published and both servers have loaded it
            let second = try store.publish()
            let new = [("If-None-Match", "\"\(second.sha256)\"")]
            for port in [channel, router] {
                let deadline = ContinuousClock.now + .seconds(5)
                while try await Self.exchange(port, "GET", "/v1/datasets/trips/manifest", new).status != 304,
                    ContinuousClock.now < deadline
                {
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
            let before = answers.value

            // Then the old ETag gets version 2 from the router, and the new one a 304 from the channel
            for path in ["/v1/datasets/trips/snapshot", "/v1/datasets/trips/manifest"] {
                let stale = try await Self.exchange(channel, "GET", path, old)
                #expect(stale.status == 200 && stale.fields.contains("ETag: \"\(second.sha256)\""), "\(stale)")
                let staleRouted = try await Self.exchange(router, "GET", path, old)
                #expect(stale == staleRouted)
                let fresh = try await Self.exchange(channel, "GET", path, new)
                #expect(fresh.status == 304 && fresh.fields.contains("ETag: \"\(second.sha256)\""))
                let freshRouted = try await Self.exchange(router, "GET", path, new)
                #expect(fresh == freshRouted)
            }
            #expect(answers.value == before + 2)
            // (The remembered 304 of the old ETag, the same bytes as the stale request above, was not used.)
        }
    }

    @Test("a scoped dataset: 401 without a valid token, the router first for a token not cached yet, then the channel")
    func scopedDatasetsKeepTheirTokenRules() async throws {
        let world = try ScopedServerTests.World.make("revalidate-scoped")
        defer { world.close() }
        try await world.publish()
        let free = try #require(try world.scoped().entry(for: "0"))
        let premium = try #require(try world.scoped().entry(for: "2"))
        let settings = ServerConfiguration.DatabaseSettings(
            templatePaths: [URL(fileURLWithPath: world.template.path)], databaseURL: world.database.url)
        let root = world.store.root
        let configuration = { @Sendable in
            var configuration = ServerConfiguration(storePath: root, port: 0, pollInterval: .milliseconds(50))
            // A window long enough that the requests below, on a busy machine, all fall inside it
            configuration.tokenCacheTTL = .seconds(5)
            configuration.database = settings
            return configuration
        }
        var log = Logger(label: "test")
        log.logLevel = .warning
        let logger = log
        let wiring: @Sendable () async throws -> ServerWiring = {
            try await ServerWiring.start(settings, logger: logger)
        }
        try await Self.withServers(configuration, wiring: wiring) { channel, router, answers, _ in
            let base = "/v1/datasets/\(ScopedServerTests.dataset)"
            let alice = ("Authorization", "Bearer alice-token")
            let tag = ("If-None-Match", "\"\(free.sha256)\"")
            // Without a token, with a malformed or unknown one: 401, from the router
            for headers in [
                [tag], [tag, ("Authorization", "Bearer bad token")], [tag, ("Authorization", "Bearer not-a-token")],
            ] {
                for path in ["\(base)/snapshot", "\(base)/manifest", "\(base)/versions/1"] {
                    let fast = try await Self.exchange(channel, "GET", path, headers)
                    let routed = try await Self.exchange(router, "GET", path, headers)
                    #expect(fast.status == 401 && fast == routed, "\(path) \(headers): \(fast)")
                }
            }
            #expect(answers.value == 0)

            // Alice's first request asks the token check (router); once her scope is cached the channel answers,
            // with the same private fields
            let first = try await Self.exchange(channel, "GET", "\(base)/snapshot", [alice, tag])
            #expect(first.status == 304 && answers.value == 0)
            for path in ["\(base)/snapshot", "\(base)/manifest", "\(base)/versions/1"] {
                let fast = try await Self.exchange(channel, "GET", path, [alice, tag])
                #expect(
                    fast.status == 304
                        && fast.fields.contains(
                            "Cache-Control: \(path.hasSuffix("versions/1") ? CachePolicy.scopedVersion : CachePolicy.scopedLatest)"
                        ))
                let routed = try await Self.exchange(router, "GET", path, [alice, tag])
                #expect(fast == routed, "\(path)")
            }
            #expect(answers.value == 3)
            // Another scope's ETag is not Alice's: her own snapshot, from the router
            let other = try await Self.exchange(
                channel, "GET", "\(base)/snapshot", [alice, ("If-None-Match", "\"\(premium.sha256)\"")])
            #expect(other.status == 200 && other.fields.contains("ETag: \"\(free.sha256)\""))
            #expect(answers.value == 3)

            // When Alice's token is revoked: the cached scope holds for its window, then the router answers 401
            try world.execute("UPDATE users SET api_token_sha256 = NULL WHERE id = 'alice'")
            // The window is time itself: wait it out
            try await Task.sleep(for: .milliseconds(5200))
            let revoked = try await Self.exchange(channel, "GET", "\(base)/snapshot", [alice, tag])
            #expect(revoked.status == 401)
            // (The same bytes were answered 304 before: a scoped answer is never remembered.)
            #expect(answers.value == 3 && answers.remembered == 0)
        }
    }
}
