import FerryCore
import FerryMerge
@testable import FerryServer
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

/// `/status` and `/status.json` on the real server (port 0): who may read them, what they say.
@Suite("Status: routes, access and the report")
struct StatusRoutesTests {
    static let token = "operator-token-0123456789"

    func withStatusServer(
        _ store: TestStore, token: String? = Self.token, mergers: [String: ChangeMerger] = [:],
        _ body: @Sendable (any TestClientProtocol, StatusBoard) async throws -> Void
    ) async throws {
        var configuration = store.configuration()
        configuration.statusToken = token
        let board = configuration.statusBoard
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let app = try await buildApplication(configuration, logger: logger, wiring: ServerWiring(mergers: mergers))
        try await app.test(.live) { client in try await body(client, board) }
    }

    static func report(_ client: any TestClientProtocol) async throws -> StatusReport {
        try await client.execute(uri: "/status.json", method: .get, headers: [.authorization: "Bearer \(token)"]) { response in
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
                let response = try await client.execute(uri: path, method: .get, headers: [.authorization: "Bearer \(Self.token)"])
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
                ("/status.json?token=\(Self.token)", [.authorization: "Bearer wrong"]),  // a wrong header is not rescued by the query
            ]
            for (path, headers) in refused {
                let response = try await client.execute(uri: path, method: .get, headers: headers)
                #expect(response.status == .unauthorized, "\(path) \(headers)")
                #expect(response.headers[.wwwAuthenticate] == #"Bearer realm="ferry""#)
                #expect(response.headers[.cacheControl] == "no-store")
                #expect(!response.bodyString.contains(Self.token))
            }
            let page = try await client.execute(uri: "/status", method: .get, headers: [.authorization: "Bearer \(Self.token)"])
            #expect(page.status == .ok)
            #expect(page.headers[.contentType] == "text/html; charset=utf-8")
            #expect(page.headers[.cacheControl] == "no-store")
            #expect(page.headers[.contentSecurityPolicy]?.hasPrefix("default-src 'none'") == true)
            #expect(!page.bodyString.contains(Self.token))
            #expect(!page.bodyString.contains("<script"))
            // The test client connects from 127.0.0.1: the query form works for it
            let query = try await client.execute(uri: "/status.json?token=\(Self.token)", method: .get)
            #expect(query.status == .ok)
            #expect(query.headers[.cacheControl] == "no-store")
            #expect(query.headers[.contentType] == "application/json")
            // A client cannot claim to be local
            let forged = try await client.execute(
                uri: "/status?token=wrong", method: .get, headers: [LoopbackPeerHandler.header: "loopback"])
            #expect(forged.status == .unauthorized)
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
            let notModified = try await client.execute(uri: "/v1/datasets/trips/snapshot", method: .get, headers: [.ifNoneMatch: etag])
            #expect(notModified.status == .notModified)
            let range = try await client.execute(uri: "/v1/datasets/trips/snapshot", method: .get, headers: [.range: "bytes=0-99"])
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
            #expect(dataset.createdAt == latest.createdAt && dataset.ageSeconds >= 0 && dataset.ageSeconds < 60)
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
            let other = report.health.datasets[0], trips = report.health.datasets[1]
            #expect(other.lastPublish?.outcome == "failed" && (other.lastPublish?.message?.count ?? 0) <= 301)
            #expect(trips.lastPublish?.outcome == "unchanged" && trips.lastPublish?.version == 3)
            #expect(!trips.merger && !trips.tokenCheck)

            // The page shows the same numbers
            let page = try await client.execute(uri: "/status", method: .get, headers: [.authorization: "Bearer \(Self.token)"])
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
                    change(.update, id: 1, values: ["seats": .string("x")], edited: "2026-11-21T09:30:00.000Z", base: base),
                ])
            let response = try await client.execute(
                uri: "/v1/datasets/trips/changes", method: .post, body: ByteBuffer(bytes: try JSONEncoder().encode(batch)))
            #expect(response.status == .ok)
            let report = try await Self.report(client)
            let totals = report.traffic.totals
            #expect([totals.applied, totals.rejected, totals.gone, totals.invalid, totals.forbidden] as [Int] == [1, 1, 1, 1, 0])
            let trips = try #require(report.health.datasets.first { $0.name == "trips" })
            #expect(trips.merger && trips.lastUpload?.succeeded == true)
        }
    }
}

@Suite("Status: ferry serve --status-token")
struct StatusTokenOptionTests {
    @Test("a short or spaced token is a usage error that does not echo it")
    func refusesWeakTokens() async throws {
        for token in ["short-token", "with space in the token 0123"] {
            let run = try await runFerryOffPool(["serve", "--store", "/tmp", "--port", "0", "--status-token", token])
            #expect(run.status == 2 && run.stderr.contains("--status-token"), "\(run.stderr)")
            #expect(!run.stderr.contains(token))
        }
        let viaEnvironment = try await runFerryOffPool(["serve", "--store", "/tmp", "--port", "0"], environment: ["FERRY_STATUS_TOKEN": "tiny"])
        #expect(viaEnvironment.status == 2 && viaEnvironment.stderr.contains("FERRY_STATUS_TOKEN"))
    }
}
