import FerryCore
import FerryMerge
import FerryPostgres
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import FerryServer

/// `POST /v1/datasets/{dataset}/changes` end to end: a live server on port 0 over a real PostgreSQL.
@Suite struct ChangesRouteTests {
    static let base = "2026-11-21T09:00:00.000Z"

    func withServer(
        limits: ChangeRequest.Limits = .init(),
        _ body: @Sendable (MergeFixture, any TestClientProtocol) async throws -> Void
    ) async throws {
        let f = try await MergeFixture.make(rule: .newestWins, clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        // The real server (empty snapshot store) over the fixture's merger, whose clock the test sets.
        let store = try TemporaryDirectory("merge-store")
        defer { store.remove() }
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        var configuration = ServerConfiguration(storePath: store.url, port: 0)
        configuration.changeLimits = limits
        let app = try await buildApplication(
            configuration, logger: logger, wiring: ServerWiring(mergers: ["trips": f.merger]))
        nonisolated(unsafe) let fixture = f
        try await app.test(.live) { client in try await body(fixture, client) }
    }

    @Test func appliesABatchAndAnswersInOrder() async throws {
        try await withServer { f, client in
            try f.seed(id: 1, created: Self.base, updated: Self.base)
            try f.seed(id: 2, created: Self.base, updated: "2026-11-21T09:50:00.000Z")
            let batch = ChangeBatch(
                clientId: "device-1", sentAt: "2026-11-21T10:00:00.000Z",
                changes: [
                    change(
                        .update, id: 1, values: ["seats": .int(1)], edited: "2026-11-21T09:30:00.000Z", base: Self.base,
                        changeID: "a"),
                    change(
                        .update, id: 2, values: ["seats": .int(2)], edited: "2026-11-21T09:30:00.000Z", base: Self.base,
                        changeID: "b"),
                    change(
                        .update, id: 3, values: ["seats": .int(3)], edited: "2026-11-21T09:30:00.000Z", base: Self.base,
                        changeID: "c"),
                    change(
                        .update, id: 1, values: ["seats": .string("x")], edited: "2026-11-21T09:30:00.000Z",
                        base: Self.base, changeID: "d"),
                ])
            let body = ByteBuffer(bytes: try JSONEncoder().encode(batch))
            for _ in 0..<2 {  // the second time: stored answers, no new effect
                try await client.execute(uri: "/v1/datasets/trips/changes", method: .post, body: body) { response in
                    #expect(response.status == .ok)
                    #expect(response.headers[.contentType] == "application/json")
                    let text = String(buffer: response.body)
                    let results = try JSONDecoder().decode(ChangeResults.self, from: Data(text.utf8)).results
                    #expect(results.map(\.id) == ["a", "b", "c", "d"])
                    #expect(results.map(\.status) == [.applied, .rejected, .gone, .invalid])
                    #expect(results[0].row?["updated_at"] == .string("2026-11-21T10:00:00.000Z"))
                    #expect(results[1].row?["seats"] == .int(0))
                    #expect(text.contains(#""row":null"#))
                }
                f.clock.set("2026-11-21T10:05:00.000Z")
            }
            #expect(try f.trip(1)?[4] == "2026-11-21T10:00:00.000000Z")
        }
    }

    @Test func malformedRequestsAre400AndApplyNothing() async throws {
        try await withServer(limits: .init(maxBodyBytes: 4096, maxChanges: 3)) { f, client in
            try f.seed(id: 1, created: Self.base, updated: Self.base)
            let one = change(
                .update, id: 1, values: ["seats": .int(9)], edited: "2026-11-21T09:30:00.000Z", base: Self.base)
            let tooMany = ChangeBatch(
                clientId: "d", sentAt: "2026-11-21T10:00:00.000Z", changes: Array(repeating: one, count: 4))
            try await client.execute(
                uri: "/v1/datasets/elsewhere/changes", method: .post, body: ByteBuffer(string: "{}")
            ) { response in
                #expect(response.status == .notFound)
            }
            try await client.execute(
                uri: "/v1/datasets/Bad.Name/changes", method: .post, body: ByteBuffer(string: "{}")
            ) { response in
                #expect(response.status == .badRequest)
            }
            // "too large" last: the server closes the connection after its 413, and the test client does not reconnect.
            let bodies: [(String, ByteBuffer, HTTPResponse.Status, String)] = [
                ("not JSON", ByteBuffer(string: "{nope"), .badRequest, "not valid JSON"),
                ("missing field", ByteBuffer(string: #"{"clientId":"d","changes":[]}"#), .badRequest, "sentAt"),
                (
                    "too many changes", ByteBuffer(bytes: try JSONEncoder().encode(tooMany)), .badRequest,
                    "over the limit of 3"
                ),
                (
                    "too large", ByteBuffer(repeating: UInt8(ascii: " "), count: 5000), .contentTooLarge,
                    "over the limit of 4096 bytes"
                ),
            ]
            for (label, body, status, expected) in bodies {
                try await client.execute(uri: "/v1/datasets/trips/changes", method: .post, body: body) { response in
                    #expect(response.status == status, "\(label)")
                    let text = String(buffer: response.body)
                    #expect(text.contains(#""code":"bad-input""#), "\(label): \(text)")
                    #expect(text.contains(expected), "\(label): \(text)")
                }
            }
            #expect(try f.trip(1)?[1] == "0")
            #expect(try f.count("SELECT count(*) FROM ferry_changes") == 0)
        }
    }
}
