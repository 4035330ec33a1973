import FerryCore
import FerryMerge
import FerryPostgres
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import Testing

@testable import FerryServer

/// `/status` and `/status.json` on the real server (port 0): who may read them, what they say.
@Suite("Status: routes, access and the report")
struct StatusRoutesTests {
    static let token = "operator-token-0123456789"

    func withStatusServer(
        _ store: TestStore, token: String? = Self.token, mergers: [String: ChangeMerger] = [:],
        authorities: [String: any ScopeAuthority] = [:],
        _ body: @Sendable (any TestClientProtocol, StatusBoard) async throws -> Void
    ) async throws {
        var configuration = store.configuration()
        configuration.statusToken = token
        let board = configuration.dependencies.statusBoard
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let app = try await buildApplication(
            configuration, logger: logger, wiring: ServerWiring(mergers: mergers, scopeAuthorities: authorities))
        try await app.test(.live) { client in try await body(client, board) }
    }

    static func report(_ client: any TestClientProtocol) async throws -> StatusReport {
        try await client.execute(uri: "/status.json", method: .get, headers: [.authorization: "Bearer \(token)"]) {
            response in
            #expect(response.status == .ok)
            return try JSONDecoder().decode(StatusReport.self, from: response.bodyData)
        }
    }

    @Test("without a status token both paths are 404")
    func offByDefault() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        try await withStatusServer(store, token: nil) { client, _ in
            for path in ["/status", "/status.json", "/status?token=\(Self.token)"] {
                let response = try await client.execute(
                    uri: path, method: .get, headers: [.authorization: "Bearer \(Self.token)"])
                #expect(response.status == .notFound, "\(path)")
            }
        }
    }

    @Test("a bearer token or ?token= from loopback opens it; anything else is 401 with WWW-Authenticate; never cached")
    func access() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        try await withStatusServer(store) { client, _ in
            let refused: [(String, HTTPFields)] = [
                ("/status", [:]),
                ("/status.json", [:]),
                ("/status", [.authorization: "Bearer wrong-token-0123456789"]),
                ("/status", [.authorization: "Bearer \(Self.token)x"]),
                ("/status", [.authorization: "Basic \(Self.token)"]),
                ("/status?token=wrong", [:]),
                // a wrong header is not rescued by the query
                ("/status.json?token=\(Self.token)", [.authorization: "Bearer wrong"]),
            ]
            for (path, headers) in refused {
                let response = try await client.execute(uri: path, method: .get, headers: headers)
                #expect(response.status == .unauthorized, "\(path) \(headers)")
                #expect(response.headers[.wwwAuthenticate] == #"Bearer realm="ferry""#)
                #expect(response.headers[.cacheControl] == "no-store")
                #expect(!response.bodyString.contains(Self.token))
            }
            let page = try await client.execute(
                uri: "/status", method: .get, headers: [.authorization: "Bearer \(Self.token)"])
            #expect(page.status == .ok)
            #expect(page.headers[.contentType] == "text/html; charset=utf-8")
            #expect(page.headers[.cacheControl] == "no-store")
            #expect(page.headers[.contentSecurityPolicy]?.hasPrefix("default-src 'none'") == true)
            #expect(!page.bodyString.contains(Self.token))
            #expect(!page.bodyString.contains("<script"))
            // The test client connects from 127.0.0.1: the right ?token= works for it
            let query = try await client.execute(uri: "/status.json?token=\(Self.token)", method: .get)
            #expect(query.status == .ok)
            #expect(query.headers[.cacheControl] == "no-store")
            #expect(query.headers[.contentType] == "application/json")
            // But not when the request names a proxy hop: nginx on this machine forwards remote clients from 127.0.0.1
            for proxied: HTTPFields in [
                [.xForwardedFor: "203.0.113.9"], [.forwarded: "for=203.0.113.9"], [.xRealIP: "203.0.113.9"],
                [.xForwardedFor: "127.0.0.1", LoopbackPeerHandler.header: "loopback"],
            ] {
                let response = try await client.execute(
                    uri: "/status.json?token=\(Self.token)", method: .get, headers: proxied)
                #expect(response.status == .unauthorized, "\(proxied)")
                #expect(response.headers[.cacheControl] == "no-store")
                #expect(response.bodyString.contains("proxy"), "\(response.bodyString)")
            }
            // A proxied request with the bearer header is fine
            let bearer = try await client.execute(
                uri: "/status.json", method: .get,
                headers: [.authorization: "Bearer \(Self.token)", .xForwardedFor: "203.0.113.9"])
            #expect(bearer.status == .ok)
        }
    }

    /// Whether the status page opens for a request that reached the server from `peer`: the request head passes the
    /// real ``LoopbackPeerHandler`` in a channel whose remote address is `peer` (the live test client always connects
    /// from 127.0.0.1), then the real ``StatusAccess`` decides.
    static func opens(from peer: String, _ path: String, headers: HTTPFields = [:]) throws -> Bool {
        let channel = EmbeddedChannel(handler: LoopbackPeerHandler())
        channel.remoteAddress = try SocketAddress(ipAddress: peer, port: 40_000)
        var head = HTTPRequest(method: .get, scheme: "http", authority: "ferry.example", path: path)
        head.headerFields = headers
        try channel.writeInbound(HTTPRequestPart.head(head))
        let part = try channel.readInbound(as: HTTPRequestPart.self)
        _ = try channel.finish()
        guard case .head(let seen)? = part else { throw FerryError(.io, "LoopbackPeerHandler passed no request head") }
        do {
            try StatusAccess(token: token).check(Request(head: seen, body: RequestBody(buffer: ByteBuffer())))
            return true
        } catch let error as ServerError {
            #expect(error.status == .unauthorized && !error.message.contains(token))
            return false
        }
    }

    @Test(
        "the right ?token= opens the page only from a loopback peer without proxy headers; the marker cannot be forged")
    func queryTokenFromPeers() throws {
        // The right token from this machine opens it
        #expect(try Self.opens(from: "127.0.0.1", "/status?token=\(Self.token)"))
        #expect(try Self.opens(from: "::1", "/status.json?token=\(Self.token)"))
        // From another machine it does not, even with the marker header claiming loopback
        for peer in ["192.0.2.7", "2001:db8::5", "::ffff:10.0.0.1"] {
            #expect(try !Self.opens(from: peer, "/status?token=\(Self.token)"), "\(peer)")
            #expect(
                try !Self.opens(
                    from: peer, "/status?token=\(Self.token)", headers: [LoopbackPeerHandler.header: "loopback"]),
                "\(peer) forged")
        }
        // Through a proxy on this machine it does not either
        #expect(
            try !Self.opens(from: "127.0.0.1", "/status?token=\(Self.token)", headers: [.xForwardedFor: "198.51.100.4"])
        )
        #expect(
            try !Self.opens(from: "127.0.0.1", "/status?token=\(Self.token)", headers: [.forwarded: "for=198.51.100.4"])
        )
        // The bearer header works from anywhere
        #expect(try Self.opens(from: "192.0.2.7", "/status", headers: [.authorization: "Bearer \(Self.token)"]))
    }

    @Test(
        "a version with a patch reports the patch's size beside the full sizes, in the JSON, the table and the size plot"
    )
    func patchSizes() async throws {
        // Given versions 1 and 2 (5 more rows) and the real patch 1 → 2 named in version 2's record
        let (store, ref) = try PatchRouteTests.storeWithPatch()
        defer { store.remove() }
        try await withStatusServer(store) { client, _ in
            let report = try await Self.report(client)
            let dataset = try #require(report.datasets.first)
            #expect(dataset.retained.map(\.version) == [1, 2])
            #expect(dataset.retained.map(\.patches) == [[], [StatusReport.Patch(from: 1, size: ref.size)]])
            #expect(ref.size > 0 && ref.size < dataset.retained[1].gzipSize)

            let page = try await client.execute(
                uri: "/status", method: .get, headers: [.authorization: "Bearer \(Self.token)"]
            ).bodyString
            #expect(page.contains(#"data-field="datasets.0.retained.1.patches.0.size" data-value="\#(ref.size)""#))
            #expect(page.contains(#"data-field="datasets.0.retained.1.patches.0.from" data-value="1">v1<"#))
            #expect(page.contains(#"<th scope="col" class="num">Patches</th>"#))
            // The size plot has a third series, labelled in text, not only by colour
            let plot = try #require(page.range(of: #"data-plot="dataset-trips""#)).upperBound
            let svg = String(page[plot...]).components(separatedBy: "</svg>")[0]
            #expect(svg.contains(#"data-series="patch""#))
            #expect(svg.contains(">patch \(StatusFormat.bytes(ref.size))</text>"), "\(svg)")
            #expect(page.contains("patch from the previous version (dotted line, triangle markers"))
        }
    }

    @Test(
        "a token check's PostgreSQL connection: unknown before use, failing with the error (no URL, no password) on a closed port, connected on the real database"
    )
    func connectionState() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        let database = try TestDatabase.create("statusconn")
        defer { database.drop() }
        // Port 1 on 127.0.0.1: nothing listens there, so a connect is refused at once
        let closedURL = "postgres://ferry:not-the-password-42@127.0.0.1:1/nowhere"
        let logger = Logger(label: "test")
        let down = PostgresScopeAuthority(
            dataset: "down", sql: "SELECT NULL::text WHERE $1 = ''", pool: PostgresPool(url: closedURL, size: 1),
            logger: logger)
        let up = PostgresScopeAuthority(
            dataset: "up", sql: "SELECT NULL::text WHERE $1 = ''", pool: PostgresPool(url: database.url, size: 1),
            logger: logger)
        defer {
            down.shutdown()
            up.shutdown()
        }
        try await withStatusServer(store, authorities: ["down": down, "up": up]) { client, _ in
            func connection(_ name: String, in report: StatusReport) -> StatusReport.Connection? {
                report.health.datasets.first { $0.name == name }?.tokenCheckConnection
            }
            // Before any token was checked nothing is known
            let before = try await Self.report(client)
            #expect(
                connection("down", in: before)?.state == "unknown" && connection("up", in: before)?.state == "unknown")

            // When each checks a token
            await #expect(throws: (any Error).self) {
                try await down.scope(forTokenSHA256: String(repeating: "0", count: 64))
            }
            #expect(try await up.scope(forTokenSHA256: String(repeating: "0", count: 64)) == nil)

            // Then the closed port is failing, with libpq's reason and no URL or password
            let report = try await Self.report(client)
            let failing = try #require(connection("down", in: report))
            #expect(failing.state == "failing" && failing.lastFailureAt != nil && failing.lastSuccessAt == nil)
            let message = try #require(failing.lastError)
            #expect(message.contains("Connection refused") || message.contains("connection"), "\(message)")
            #expect(
                !message.contains("not-the-password-42") && !message.contains("postgres://")
                    && !message.contains("nowhere"), "\(message)")
            // And the real database is connected
            let connected = try #require(connection("up", in: report))
            #expect(connected.state == "connected" && connected.lastSuccessAt != nil && connected.lastError == nil)

            // The page shows both states in words
            let page = try await client.execute(
                uri: "/status", method: .get, headers: [.authorization: "Bearer \(Self.token)"]
            ).bodyString
            #expect(
                page.contains(#"data-value="failing">failing</span>"#)
                    && page.contains(#"data-value="connected">connected</span>"#))
            #expect(!page.contains("not-the-password-42"))
        }
    }

    @Test("the report has each dataset's versions, sizes and rows, and counts the traffic of other routes")
    func reportAndTraffic() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish(rows: 10)
        try store.publish(rows: 30)
        let latest = try store.publish(rows: 50, blobBytes: 100_000)
        try await withStatusServer(store) { client, board in
            // Given some traffic: a full download, a 304, a range and a 404
            let snapshot = try await client.execute(uri: "/v1/datasets/trips/snapshot", method: .get)
            #expect(snapshot.status == .ok)
            let etag = try #require(snapshot.headers[.eTag])
            let notModified = try await client.execute(
                uri: "/v1/datasets/trips/snapshot", method: .get, headers: [.ifNoneMatch: etag])
            #expect(notModified.status == .notModified)
            let range = try await client.execute(
                uri: "/v1/datasets/trips/snapshot", method: .get, headers: [.range: "bytes=0-99"])
            #expect(range.status == .partialContent)
            let missing = try await client.execute(uri: "/v1/datasets/nope/manifest", method: .get)
            #expect(missing.status == .notFound)
            _ = try await client.execute(uri: "/status", method: .get)  // a 401 on the status page: not counted
            board.recordPublish(dataset: "trips", outcome: .unchanged(version: 3))
            board.recordPublish(dataset: "other", outcome: .failed(message: String(repeating: "x", count: 400)))

            let report = try await Self.report(client)
            let dataset = try #require(report.datasets.first)
            #expect(report.datasets.count == 1)
            #expect(dataset.name == "trips" && !dataset.scoped && dataset.scopes == nil)
            #expect(dataset.version == 3 && dataset.size == latest.size && dataset.gzipSize == latest.gzipSize)
            #expect(dataset.tables == ["trips": 50] && dataset.rows == 50)
            #expect(dataset.createdAt == latest.createdAt && dataset.ageSeconds >= 0 && dataset.ageSeconds < 600)
            #expect(dataset.retained.map(\.version) == [1, 2, 3])
            #expect(dataset.retained.map(\.rows) == [10, 30, 50])
            let records = try (1...3).map { try #require(try store.store.record(dataset: "trips", version: $0)) }
            #expect(dataset.retained.map(\.size) == records.map(\.size))
            #expect(dataset.retained.map(\.gzipSize) == records.map(\.gzipSize))
            #expect(dataset.retained.map(\.createdAt) == records.map(\.createdAt))

            let totals = report.traffic.totals
            #expect(report.traffic.minutes.count == 60 && report.traffic.bucketSeconds == 60)
            #expect(totals.ok == 1 && totals.notModified == 1 && totals.partial == 1 && totals.clientError == 1)
            #expect(totals.serverError == 0 && totals.uploads == 0)
            #expect(totals.bytes >= latest.size + 100 && totals.bytes < latest.size + 2000)

            #expect(report.health.lastPollAt != nil && report.health.unreadableManifests.isEmpty)
            #expect(report.health.datasets.map(\.name) == ["other", "trips"])
            let other = report.health.datasets[0]
            let trips = report.health.datasets[1]
            #expect(other.lastPublish?.outcome == "failed" && (other.lastPublish?.message?.count ?? 0) <= 301)
            #expect(trips.lastPublish?.outcome == "unchanged" && trips.lastPublish?.version == 3)
            #expect(!trips.merger && !trips.tokenCheck)

            // The page shows the same numbers
            let page = try await client.execute(
                uri: "/status", method: .get, headers: [.authorization: "Bearer \(Self.token)"])
            #expect(page.bodyString.contains(#"data-field="datasets.0.size" data-value="\#(latest.size)""#))
            #expect(page.bodyString.contains(#"data-field="traffic.totals.notModified" data-value="1""#))
            #expect(page.bodyString.contains(#"data-plot="dataset-trips""#))
        }
    }

    @Test("an unreadable manifest is reported by dataset name")
    func unreadableManifest() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        try store.publish("broken")
        try await withStatusServer(store) { client, _ in
            try Data("{not json".utf8).write(to: store.store.manifestURL(dataset: "broken"))
            var report = try await Self.report(client)
            for _ in 0..<50 where report.health.unreadableManifests.isEmpty {
                try await Task.sleep(for: .milliseconds(100))
                report = try await Self.report(client)
            }
            #expect(report.health.unreadableManifests == ["broken"])
            #expect(report.health.datasets.map(\.name).contains("broken"))
        }
    }

    @Test("uploads are counted by decision, and the dataset shows a merger")
    func uploadsCounted() async throws {
        let fixture = try await MergeFixture.make(rule: .newestWins, clock: "2026-11-21T10:00:00.000Z")
        defer { fixture.close() }
        let store = try TestStore()
        defer { store.remove() }
        let base = "2026-11-21T09:00:00.000Z"
        try fixture.seed(id: 1, created: base, updated: base)
        try fixture.seed(id: 2, created: base, updated: "2026-11-21T09:50:00.000Z")
        nonisolated(unsafe) let merger = fixture.merger
        try await withStatusServer(store, mergers: ["trips": merger]) { client, _ in
            let batch = ChangeBatch(
                clientId: "device-1", sentAt: "2026-11-21T10:00:00.000Z",
                changes: [
                    change(.update, id: 1, values: ["seats": .int(1)], edited: "2026-11-21T09:30:00.000Z", base: base),
                    change(.update, id: 2, values: ["seats": .int(2)], edited: "2026-11-21T09:30:00.000Z", base: base),
                    change(.update, id: 3, values: ["seats": .int(3)], edited: "2026-11-21T09:30:00.000Z", base: base),
                    change(
                        .update, id: 1, values: ["seats": .string("x")], edited: "2026-11-21T09:30:00.000Z", base: base),
                ])
            let response = try await client.execute(
                uri: "/v1/datasets/trips/changes", method: .post,
                body: ByteBuffer(bytes: try JSONEncoder().encode(batch)))
            #expect(response.status == .ok)
            let report = try await Self.report(client)
            let totals = report.traffic.totals
            #expect(
                [totals.applied, totals.rejected, totals.gone, totals.invalid, totals.forbidden] as [Int] == [
                    1, 1, 1, 1, 0,
                ])
            let trips = try #require(report.health.datasets.first { $0.name == "trips" })
            #expect(trips.merger && trips.lastUpload?.succeeded == true)
            #expect(trips.mergerConnection?.state == "connected" && trips.mergerConnection?.lastSuccessAt != nil)
            #expect(trips.mergerConnection?.lastError == nil && trips.tokenCheckConnection == nil)
        }
    }
}

extension HTTPField.Name {
    static let xForwardedFor = HTTPField.Name("X-Forwarded-For")!
    static let forwarded = HTTPField.Name("Forwarded")!
    static let xRealIP = HTTPField.Name("X-Real-IP")!
}

@Suite("Status: ferry serve --status-token")
struct StatusTokenOptionTests {
    @Test("a short or spaced token is a usage error that does not echo it")
    func refusesWeakTokens() async throws {
        for token in ["short-token", "with space in the token 0123"] {
            let run = try await runFerry(["serve", "--store", "/tmp", "--port", "0", "--status-token", token])
            #expect(run.status == 2 && run.stderr.contains("--status-token"), "\(run.stderr)")
            #expect(!run.stderr.contains(token))
        }
        let viaEnvironment = try await runFerry(
            ["serve", "--store", "/tmp", "--port", "0"], environment: ["FERRY_STATUS_TOKEN": "tiny"])
        #expect(viaEnvironment.status == 2 && viaEnvironment.stderr.contains("FERRY_STATUS_TOKEN"))
    }
}
