import FerryCore
import FerryPostgres
import FerryPublisher
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import FerryServer

/// Stateless replicas (issue #12, docs/deploy.md): two servers built with `buildApplication` over one store
/// directory and one PostgreSQL, each on its own ephemeral port on 127.0.0.1, as `ferry serve` replicas behind
/// a load balancer. Whatever one replica did, the other answers the same.
@Suite("Server: stateless replicas on one store and one database")
struct ReplicaTests {
    typealias World = ScopedServerTests.World
    static let tiered = ScopedServerTests.dataset
    static let publicTemplate = TestPaths.packageRoot.appendingPathComponent("templates/campgrounds.yml")

    /// A replica: the public campgrounds and the tiered dataset, with their mergers and token check.
    static func replica(_ world: World) async throws -> some ApplicationProtocol {
        var logger = Logger(label: "replica")
        logger.logLevel = .warning
        var configuration = ServerConfiguration(storePath: world.store.root, port: 0, pollInterval: .milliseconds(100))
        configuration.database = .init(
            templatePaths: [publicTemplate, URL(fileURLWithPath: world.template.path)], databaseURL: world.database.url)
        return try await buildApplication(configuration, logger: logger)
    }

    static func publishPublic(_ world: World) async throws {
        _ = try await Publisher(
            configuration: .init(
                templatePath: publicTemplate.path, databaseURL: world.database.url, store: world.store.root),
            logger: Logger(label: "test")
        ).publish()
    }

    @Test("the same change batch sent to two replicas at the same instant has exactly one effect and one answer")
    func sameBatchTwoReplicas() async throws {
        let world = try World.make("replica-batch")
        defer { world.close() }
        try await world.publish()
        // Every committed write to campgrounds leaves one audit row: a change applied twice would leave two.
        try world.execute(
            """
            INSERT INTO campgrounds (id, name, lat, lon, tier, created_at, updated_at)
              SELECT 'replica-' || g, 'Site ' || g, 0, 0, 0, '2024-01-01T00:00:00Z', '2024-01-01T00:00:00Z' FROM generate_series(1, 20) g;
            CREATE TABLE audit (n bigserial PRIMARY KEY, id text NOT NULL, name text);
            CREATE FUNCTION audit_write() RETURNS trigger LANGUAGE plpgsql AS $$
              BEGIN INSERT INTO audit (id, name) VALUES (NEW.id, NEW.name); RETURN NEW; END $$;
            CREATE TRIGGER audit_write AFTER INSERT OR UPDATE ON campgrounds FOR EACH ROW EXECUTE FUNCTION audit_write();
            """)
        let rounds = 12
        let rowsPerBatch = 20
        let uri = "/v1/datasets/\(Self.tiered)/changes"
        let headers = ScopedServerTests.bob + [.contentType: "application/json"]
        let a = try await Self.replica(world)
        let b = try await Self.replica(world)
        try await a.test(.live) { first in
            try await b.test(.live) { second in
                var overlapping = 0
                for round in 0..<rounds {
                    // Given one batch (fresh change ids, one edit per row, edited now),
                    let now = Timestamp.format(Date())
                    let changes = (1...rowsPerBatch).map { row in
                        Change(
                            id: "round-\(round)-row-\(row)", table: "campgrounds", op: .update,
                            key: ["id": .string("replica-\(row)")],
                            values: ["name": .string("Round \(round) site \(row)")], editedAt: now, baseUpdatedAt: nil)
                    }
                    let body = ByteBuffer(
                        bytes: try JSONEncoder().encode(
                            ChangeBatch(clientId: "device-r", sentAt: now, changes: changes)))
                    // when both replicas receive it at the same instant,
                    async let left = Self.timed {
                        try await first.execute(uri: uri, method: .post, headers: headers, body: body)
                    }
                    async let right = Self.timed {
                        try await second.execute(uri: uri, method: .post, headers: headers, body: body)
                    }
                    let (l, r) = try await (left, right)
                    if l.start < r.end && r.start < l.end { overlapping += 1 }
                    // then both answer 200 with the same results, every change applied once.
                    #expect(l.response.status == .ok && r.response.status == .ok, "round \(round)")
                    let lr = try JSONDecoder().decode(ChangeResults.self, from: l.response.bodyData).results
                    let rr = try JSONDecoder().decode(ChangeResults.self, from: r.response.bodyData).results
                    let same = lr == rr
                    #expect(same, "round \(round): the replicas answered differently")
                    let applied = lr.filter { $0.status == .applied }.count
                    #expect(applied == rowsPerBatch, "round \(round): \(applied) of \(rowsPerBatch) applied")
                }
                // The test means something only if the two requests really were in flight together.
                #expect(overlapping > 0, "no round had both requests in flight at once")
            }
        }
        let pg = try world.database.connect()
        func count(_ sql: String) throws -> Int { Int((try pg.query(sql).first?.first ?? nil) ?? "-1") ?? -1 }
        #expect(try count("SELECT count(*) FROM audit") == rounds * rowsPerBatch)
        #expect(
            try count("SELECT count(*) FROM (SELECT id, name FROM audit GROUP BY id, name HAVING count(*) > 1) twice")
                == 0)
        #expect(try count("SELECT count(*) FROM ferry_changes WHERE id LIKE 'round-%'") == rounds * rowsPerBatch)
        #expect(
            try count("SELECT count(*) FROM campgrounds WHERE name LIKE 'Round \(rounds - 1) site %'") == rowsPerBatch)
    }

    @Test("a revoked token is refused by every replica within the documented window (the token cache, 5 s)")
    func revokeReachesEveryReplica() async throws {
        let world = try World.make("replica-revoke")
        defer { world.close() }
        try await world.publish()
        let window = ServerConfiguration(storePath: world.store.root).tokenCacheTTL
        #expect(window == .seconds(5))  // the value docs/http-api.md and docs/deploy.md promise
        let a = try await Self.replica(world)
        let b = try await Self.replica(world)
        let uri = "/v1/datasets/\(Self.tiered)/manifest"
        try await a.test(.live) { first in
            try await b.test(.live) { second in
                let replicas = [first, second]
                // Given bob's token cached as valid on both replicas,
                for client in replicas {
                    #expect(
                        try await client.execute(uri: uri, method: .get, headers: ScopedServerTests.bob).status == .ok)
                }
                // when it is revoked in PostgreSQL,
                try world.execute("UPDATE users SET api_token_sha256 = NULL WHERE id = 'bob'")
                let revoked = ContinuousClock.now
                // then each replica refuses it within the window (polled every 0.1 s, at most window + 3 s).
                var refusedAfter: [Duration?] = [nil, nil]
                while refusedAfter.contains(where: { $0 == nil }), ContinuousClock.now - revoked < window + .seconds(10)
                {
                    for (index, client) in replicas.enumerated() where refusedAfter[index] == nil {
                        // Timed from when the request was sent: a busy machine's slow answer is not a late refusal
                        let sent = ContinuousClock.now
                        let status = try await client.execute(uri: uri, method: .get, headers: ScopedServerTests.bob)
                            .status
                        if status == .unauthorized { refusedAfter[index] = sent - revoked }
                    }
                    try await Task.sleep(for: .milliseconds(100))
                }
                for (index, after) in refusedAfter.enumerated() {
                    let after = try #require(after, "replica \(index) still accepts the revoked token")
                    // The window, with a generous margin for a busy machine (the loop gives up at window + 10 s)
                    #expect(after <= window + .seconds(8), "replica \(index) refused it only after \(after)")
                }
                // and every route refuses it from then on, on both, from the cache's object lookups to the bytes.
                let base = "/v1/datasets/\(Self.tiered)"
                for client in replicas {
                    for path in ["/manifest", "/snapshot", "/versions/1", "/versions/1/object"] {
                        let response = try await client.execute(
                            uri: base + path, method: .get, headers: ScopedServerTests.bob)
                        #expect(response.status == .unauthorized, "\(path)")
                    }
                }
            }
        }
    }

    /// What a client can observe of a replica: manifests, lists, and every retained version's headers and bytes,
    /// for the public dataset and for each token of the scoped one.
    static func observe(_ client: any TestClientProtocol) async throws -> [String] {
        var seen: [String] = []
        func record(_ label: String, _ response: TestResponse, headers names: [String]) {
            let values = names.map { "\($0)=\(response.header($0) ?? "-")" }.joined(separator: " ")
            seen.append("\(label) \(response.status.code) \(values) body=\(sha256Hex(response.body))")
        }
        let list = try await client.execute(uri: "/v1/datasets", method: .get)
        record("list", list, headers: ["Cache-Control"])
        let audiences: [(String, String, HTTPFields)] = [
            ("public", "campgrounds", [:]), ("alice", tiered, ScopedServerTests.alice),
            ("bob", tiered, ScopedServerTests.bob),
        ]
        for (who, dataset, token) in audiences {
            let base = "/v1/datasets/\(dataset)"
            let manifest = try await client.execute(uri: "\(base)/manifest", method: .get, headers: token)
            record("\(who) manifest", manifest, headers: ["ETag", "Ferry-Version", "Cache-Control", "Content-Length"])
            let versions = try JSONDecoder().decode(Manifest.self, from: manifest.bodyData).versions
            for version in versions {
                for accept in ["gzip", "identity"] {
                    let headers = token + [.acceptEncoding: accept]
                    let response = try await client.execute(
                        uri: "\(base)/versions/\(version)", method: .get, headers: headers)
                    record(
                        "\(who) v\(version) \(accept)", response,
                        headers: [
                            "ETag", "Repr-Digest", "Content-Length", "Content-Encoding", "Ferry-Version",
                            "Cache-Control", "Vary",
                        ])
                    let lookup = try await client.execute(
                        uri: "\(base)/versions/\(version)/object", method: .get, headers: headers)
                    record("\(who) v\(version) \(accept) lookup", lookup, headers: ["Ferry-Object"])
                }
            }
        }
        return seen
    }

    @Test("a replica started later serves the same manifests, ETags and bytes as one that saw every publish")
    func lateReplicaServesTheSame() async throws {
        let world = try World.make("replica-late")
        defer { world.close() }
        try await world.publish()
        try await Self.publishPublic(world)
        let early = try await Self.replica(world)
        try await early.test(.live) { first in
            // Given an early replica that served version 1 and then saw version 2 published while it ran,
            let before = try await Self.observe(first)
            try world.execute("UPDATE campgrounds SET name = 'Pine Hollow II', updated_at = now() WHERE tier = 0")
            try await world.publish()
            try await Self.publishPublic(world)
            // (Both datasets' version 2, the scoped one published first: a version stored as a step is served once
            // the replica built it, so the two may show up a poll apart.)
            let deadline = ContinuousClock.now + .seconds(30)
            var current = before
            func servesBoth() -> Bool {
                current.contains { $0.hasPrefix("bob v2 gzip ") }
                    && current.contains { $0.hasPrefix("public v2 gzip ") }
            }
            while !servesBoth(), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
                current = try await Self.observe(first)
            }
            #expect(current != before, "the early replica never served version 2")
            #expect(
                current.contains { $0.hasPrefix("bob v2 gzip ") }
                    && current.contains { $0.hasPrefix("public v2 gzip ") })
            // when a second replica starts only now,
            let late = try await Self.replica(world)
            try await late.test(.live) { second in
                // then every answer a client can see is the same on both, byte for byte and header for header.
                let fromLate = try await Self.observe(second)
                let fromEarly = try await Self.observe(first)
                #expect(fromLate == fromEarly)
                // The list, 3 manifests, and 3 audiences × 2 versions × 2 encodings × (GET, lookup).
                let expected = 4 + 24
                #expect(fromLate.count >= expected)
            }
        }
    }

    struct Timed: Sendable {
        let response: TestResponse
        let start: ContinuousClock.Instant
        let end: ContinuousClock.Instant
    }

    static func timed(_ body: @Sendable () async throws -> TestResponse) async throws -> Timed {
        let start = ContinuousClock.now
        let response = try await body()
        return Timed(response: response, start: start, end: ContinuousClock.now)
    }
}
