import FerryCore
import FerryMerge
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

/// Access rights end to end on the server: the sample campgrounds in a real PostgreSQL, published per tier by the
/// real publisher, served by the real server with the template's token query, changes merged per scope.
/// Alice's token is 'alice-token' (tier 0), Bob's 'bob-token' (tier 2); see templates/campgrounds.pg.sql.
@Suite("Server: scoped datasets (bearer tokens, per-scope snapshots, scoped changes)")
struct ScopedServerTests {
    static let dataset = "campgrounds-tiered"
    static let alice: HTTPFields = [.authorization: "Bearer alice-token"]
    static let bob: HTTPFields = [.authorization: "Bearer bob-token"]

    /// Everything a test needs: database, store, publisher, and the server's pieces.
    struct World: @unchecked Sendable {
        let database: TestDatabase
        let directory: TemporaryDirectory
        let template: Template
        var store: FileSnapshotStore { FileSnapshotStore(root: directory.appending("store")) }

        static func make(_ label: String) throws -> World {
            let database = try TestDatabase.create(label)
            let sql = try String(
                contentsOf: TestPaths.packageRoot.appendingPathComponent("templates/campgrounds.pg.sql"),
                encoding: .utf8)
            try database.connect().execute(sql)
            let directory = try TemporaryDirectory("ferry-\(label)")
            let template = try Template.load(
                path: TestPaths.packageRoot.appendingPathComponent("templates/campgrounds-tiered.yml").path)
            return World(database: database, directory: directory, template: template)
        }

        /// Publishes on the publisher's own thread (never blocking the test's cooperative thread).
        @discardableResult
        func publish() async throws -> PublishResult {
            try await Publisher(
                configuration: .init(templatePath: template.path, databaseURL: database.url, store: store.root),
                logger: Logger(label: "test")
            ).publish()
        }

        func execute(_ sql: String) throws { try database.connect().execute(sql) }

        func scoped() throws -> StoredManifest {
            let manifest = try store.requireManifest(ScopedServerTests.dataset)
            guard manifest.scoped else { throw FerryError(.store, "not scoped") }
            return manifest
        }

        func close() {
            database.drop()
            directory.remove()
        }

        /// Runs `body` against the live server (port 0) with the token check and the changes route.
        func withServer(
            ttl: Duration = .seconds(5), authority: Bool = true, logger: Logger? = nil,
            _ body: @Sendable (any TestClientProtocol) async throws -> Void
        ) async throws {
            var log = logger ?? Logger(label: "test")
            if logger == nil { log.logLevel = .warning }
            var configuration = ServerConfiguration(storePath: store.root, port: 0, pollInterval: .milliseconds(50))
            configuration.tokenCacheTTL = ttl
            guard authority else {
                // A server whose token check is missing (the wiring without one): scoped routes answer 503.
                let merger = try await ChangeMerger.start(template: template, databaseURL: database.url, logger: log)
                defer { merger.shutdown() }
                let app = try await buildApplication(
                    configuration, logger: log, wiring: ServerWiring(mergers: [Self.datasetName: merger]))
                try await app.test(.live) { client in try await body(client) }
                return
            }
            configuration.database = .init(
                templatePaths: [URL(fileURLWithPath: template.path)], databaseURL: database.url)
            let app = try await buildApplication(configuration, logger: log)
            try await app.test(.live) { client in try await body(client) }
        }

        static let datasetName = ScopedServerTests.dataset
    }

    static func manifest(_ response: TestResponse) throws -> Manifest {
        try JSONDecoder().decode(Manifest.self, from: response.bodyData)
    }

    @Test(
        "every route of a scoped dataset answers 401 with WWW-Authenticate without a valid token; the list hides the scopes"
    )
    func needsAToken() async throws {
        let world = try World.make("scoped-401")
        defer { world.close() }
        try await world.publish()
        try await world.withServer { client in
            let base = "/v1/datasets/\(Self.dataset)"
            let routes: [(String, HTTPRequest.Method)] = [
                ("\(base)/manifest", .get), ("\(base)/manifest", .head), ("\(base)/snapshot", .get),
                ("\(base)/snapshot", .head),
                ("\(base)/versions/1", .get), ("\(base)/changes", .post),
            ]
            let cases: [(HTTPFields, String)] = [
                ([:], #"Bearer realm="ferry""#),
                ([.authorization: "Basic YWxpY2U6cHc="], #"Bearer realm="ferry""#),
                (
                    [.authorization: "Bearer not-a-token"],
                    #"Bearer realm="ferry", error="invalid_token", error_description="the token is unknown or revoked""#
                ),
                (
                    [.authorization: "Bearer bad token with spaces"],
                    #"Bearer realm="ferry", error="invalid_token", error_description="the token is malformed""#
                ),
            ]
            for (uri, method) in routes {
                for (headers, challenge) in cases {
                    try await client.execute(
                        uri: uri, method: method, headers: headers,
                        body: method == .post ? ByteBuffer(string: "{}") : nil
                    ) { response in
                        #expect(response.status == .unauthorized, "\(method) \(uri)")
                        #expect(response.header("WWW-Authenticate") == challenge, "\(method) \(uri)")
                        if method != .head {
                            #expect(response.bodyString.contains(#""code":"unauthorized""#))
                            #expect(
                                !response.bodyString.contains("token with")
                                    && !response.bodyString.contains("not-a-token"))
                        }
                    }
                }
            }
            try await client.execute(uri: "/v1/datasets", method: .get) { response in
                #expect(response.bodyString == #"{"datasets":[{"dataset":"campgrounds-tiered","scoped":true}]}"#)
            }
        }
    }

    @Test("each token gets its own scope's manifest and snapshot, privately cacheable, with 304 on revalidation")
    func eachTokenItsScope() async throws {
        let world = try World.make("scoped-views")
        defer { world.close() }
        try await world.publish()
        let scopes = try world.scoped()
        let free = try #require(scopes.entry(for: "0"))
        let premium = try #require(scopes.entry(for: "2"))
        try await world.withServer { client in
            for (headers, entry) in [(Self.alice, free), (Self.bob, premium)] {
                try await client.execute(uri: "/v1/datasets/\(Self.dataset)/manifest", method: .get, headers: headers) {
                    response in
                    #expect(response.status == .ok)
                    let manifest = try Self.manifest(response)
                    #expect(manifest == entry.manifest(dataset: Self.dataset))
                    #expect(response.header("Cache-Control") == "private, no-cache")
                }
                try await client.execute(uri: "/v1/datasets/\(Self.dataset)/snapshot", method: .get, headers: headers) {
                    response in
                    #expect(response.status == .ok)
                    #expect(sha256Hex(response.body) == entry.sha256)
                    #expect(response.header("ETag") == "\"\(entry.sha256)\"")
                    #expect(response.header("Cache-Control") == "private, no-cache")
                }
                var conditional = headers
                conditional[.ifNoneMatch] = "\"\(entry.sha256)\""
                try await client.execute(
                    uri: "/v1/datasets/\(Self.dataset)/snapshot", method: .get, headers: conditional
                ) { response in
                    #expect(response.status == .notModified)
                    #expect(response.header("Cache-Control") == "private, no-cache")
                }
                try await client.execute(uri: "/v1/datasets/\(Self.dataset)/versions/1", method: .get, headers: headers)
                { response in
                    #expect(response.status == .ok && sha256Hex(response.body) == entry.sha256)
                    #expect(response.header("Cache-Control") == "private, max-age=31536000, immutable")
                }
            }
        }
    }

    @Test("a token cannot reach another scope's data by URL, query, header or version number")
    func noCrossScope() async throws {
        let world = try World.make("scoped-cross")
        defer { world.close() }
        try await world.publish()
        try world.execute("UPDATE campgrounds SET name = 'AAA Deluxe II' WHERE tier = 1")
        try await world.publish()  // premium gets version 2; free stays at 1
        let scopes = try world.scoped()
        let free = try #require(scopes.entry(for: "0"))
        let premium = try #require(scopes.entry(for: "2"))
        #expect(free.version == 1 && premium.retained.map(\.version) == [1, 2])
        let premiumV1 = try #require(premium.record(version: 1))

        try await world.withServer { client in
            let base = "/v1/datasets/\(Self.dataset)"
            // Premium's version 2 does not exist for Alice.
            try await client.execute(uri: "\(base)/versions/2", method: .get, headers: Self.alice) { response in
                #expect(response.status == .notFound)
                #expect(!response.bodyString.contains(premium.sha256))
            }
            // Version 1 is Alice's own version 1, never premium's.
            try await client.execute(uri: "\(base)/versions/1", method: .get, headers: Self.alice) { response in
                #expect(sha256Hex(response.body) == free.sha256 && free.sha256 != premiumV1.sha256)
            }
            // Naming premium's checksum or tag, a scope in the query or a header changes nothing.
            var tricks: [(String, HTTPFields)] = [
                ("\(base)/snapshot?checksum=\(premium.sha256)", Self.alice),
                ("\(base)/snapshot?scope=2", Self.alice),
                ("\(base)/snapshot", Self.alice + [.init("Ferry-Scope")!: "2", .ifNoneMatch: "\"\(premium.sha256)\""]),
                ("\(base)/versions/1?scope=2", Self.alice),
            ]
            tricks.append(("/v1/datasets/\(Self.dataset)/../\(Self.dataset)/snapshot", Self.alice))
            for (uri, headers) in tricks {
                try await client.execute(uri: uri, method: .get, headers: headers) { response in
                    if response.status == .ok {
                        #expect(sha256Hex(response.body) == free.sha256, "\(uri)")
                    } else {
                        #expect(response.status == .notFound || response.status == .badRequest, "\(uri)")
                    }
                }
            }
            // Two Authorization headers: refused, not the more privileged one.
            var two = HTTPFields()
            two.append(HTTPField(name: .authorization, value: "Bearer alice-token"))
            two.append(HTTPField(name: .authorization, value: "Bearer bob-token"))
            try await client.execute(uri: "\(base)/snapshot", method: .get, headers: two) { response in
                #expect(response.status == .unauthorized)
            }
        }
    }

    @Test("a revoked token works until the cache window ends, then gets 401; a grant switches the scope the same way")
    func revokeAndGrant() async throws {
        let world = try World.make("scoped-revoke")
        defer { world.close() }
        try await world.publish()
        let premium = try #require(try world.scoped().entry(for: "2"))
        // A window long enough that the request right after the revoke is inside it on a busy machine
        let ttl = Duration.seconds(6)
        try await world.withServer(ttl: ttl) { client in
            let uri = "/v1/datasets/\(Self.dataset)/manifest"
            try await client.execute(uri: uri, method: .get, headers: Self.bob) { #expect($0.status == .ok) }
            try world.execute("UPDATE users SET api_token_sha256 = NULL WHERE id = 'bob'")
            try await client.execute(uri: uri, method: .get, headers: Self.bob) { #expect($0.status == .ok) }  // cached
            // The window is time itself: wait it out
            try await Task.sleep(for: ttl + .milliseconds(200))
            try await client.execute(uri: uri, method: .get, headers: Self.bob) { response in
                #expect(response.status == .unauthorized)
                #expect(
                    response.header("WWW-Authenticate")
                        == #"Bearer realm="ferry", error="invalid_token", error_description="the token is unknown or revoked""#
                )
            }

            // Alice upgrades to tier 2: after the window she reads the premium snapshot.
            try await client.execute(uri: uri, method: .get, headers: Self.alice) { response in
                let manifest = try Self.manifest(response)
                #expect(manifest.sha256 != premium.sha256)
            }
            try world.execute("UPDATE users SET access_tier = 2 WHERE id = 'alice'")
            try await Task.sleep(for: ttl + .milliseconds(200))
            try await client.execute(uri: uri, method: .get, headers: Self.alice) { response in
                let manifest = try Self.manifest(response)
                #expect(manifest.sha256 == premium.sha256)
            }
        }
    }

    @Test("a scope with no snapshot yet is 404; a scoped dataset on a server without its token check is 503")
    func missingScopeAndMisconfiguration() async throws {
        let world = try World.make("scoped-missing")
        defer { world.close() }
        try await world.publish()
        try world.execute("INSERT INTO users VALUES ('carol', 'Carol', 1, encode(sha256('carol-token'::bytea), 'hex'))")
        try await world.withServer { client in
            try await client.execute(
                uri: "/v1/datasets/\(Self.dataset)/snapshot", method: .get,
                headers: [.authorization: "Bearer carol-token"]
            ) {
                #expect($0.status == .notFound && $0.bodyString.contains("no snapshot for your access scope yet"))
            }
        }
        try await world.withServer(authority: false) { client in
            try await client.execute(uri: "/v1/datasets/\(Self.dataset)/snapshot", method: .get, headers: Self.alice) {
                #expect($0.status == .serviceUnavailable)
            }
        }
    }

    static func batch(_ changes: [Change]) throws -> ByteBuffer {
        ByteBuffer(
            bytes: try JSONEncoder().encode(
                ChangeBatch(clientId: "alice-phone", sentAt: Timestamp.format(Date()), changes: changes)))
    }

    static func change(_ id: String, _ op: Change.Operation, _ key: String, _ values: [String: JSONValue] = [:])
        -> Change
    {
        Change(
            id: id, table: "campgrounds", op: op, key: ["id": .string(key)], values: values,
            editedAt: Timestamp.format(Date()), baseUpdatedAt: nil)
    }

    @Test(
        "outbox changes must stay inside the caller's scope before and after; otherwise forbidden and nothing written")
    func scopedChanges() async throws {
        let world = try World.make("scoped-changes")
        defer { world.close() }
        try await world.publish()
        let free1 = "0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e01"
        let free3 = "0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e03"
        let premium2 = "0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e02"
        let newFree = "7a0c1e52-1111-4a39-9d8e-000000000001"
        let newPremium = "7a0c1e52-1111-4a39-9d8e-000000000002"
        try await world.withServer { client in
            let uri = "/v1/datasets/\(Self.dataset)/changes"
            let changes = [
                Self.change("c1", .update, premium2, ["name": .string("Alice was here")]),  // invisible before
                Self.change("c2", .update, free1, ["description": .string("Bring a torch.")]),  // fine
                Self.change("c3", .update, free3, ["tier": .int(1)]),  // would leave her scope
                Self.change(
                    "c4", .insert, newPremium,
                    ["name": .string("Mine"), "lat": .double(1), "lon": .double(2), "tier": .int(2)]),
                Self.change(
                    "c5", .insert, newFree,
                    ["name": .string("Mine too"), "lat": .double(1), "lon": .double(2), "tier": .int(0)]),
                Self.change("c6", .delete, premium2),
            ]
            try await client.execute(uri: uri, method: .post, headers: Self.alice, body: try Self.batch(changes)) {
                response in
                #expect(response.status == .ok)
                let results = try JSONDecoder().decode(ChangeResults.self, from: response.bodyData).results
                #expect(
                    results.map(\.status) == [.forbidden, .applied, .forbidden, .forbidden, .applied, .forbidden],
                    "\(response.bodyString)")
                #expect(results[0].row == nil && !response.bodyString.contains("AAA Deluxe"))
            }
            let pg = try world.database.connect()
            #expect(
                try pg.query("SELECT name, tier::text FROM campgrounds WHERE id = $1", [premium2]) == [
                    ["AAA Deluxe Campground", "1"]
                ])
            #expect(
                try pg.query("SELECT description, tier::text FROM campgrounds WHERE id = $1", [free1]) == [
                    ["Bring a torch.", "0"]
                ])
            #expect(try pg.query("SELECT tier::text FROM campgrounds WHERE id = $1", [free3]) == [["0"]])
            #expect(
                try pg.query("SELECT count(*)::text FROM campgrounds WHERE id IN ($1, $2)", [newFree, newPremium]) == [
                    ["1"]
                ])

            // Bob's scope includes the premium campground.
            try await client.execute(
                uri: uri, method: .post, headers: Self.bob,
                body: try Self.batch([Self.change("b1", .update, premium2, ["name": .string("Bob's pick")])])
            ) {
                let results = try JSONDecoder().decode(ChangeResults.self, from: $0.bodyData).results
                #expect(results.map(\.status) == [.applied])
            }
            #expect(try pg.query("SELECT name FROM campgrounds WHERE id = $1", [premium2]) == [["Bob's pick"]])
        }
    }

    @Test("tokens and their hashes never appear in the server's logs or error bodies")
    func tokensStayOutOfLogs() async throws {
        let world = try World.make("scoped-logs")
        defer { world.close() }
        try await world.publish()
        let sink = LogSink()
        var logger = Logger(label: "test") { _ in sink }
        logger.logLevel = .trace
        try await world.withServer(logger: logger) { client in
            for token in ["alice-token", "no-such-token-123"] {
                for uri in [
                    "/v1/datasets/\(Self.dataset)/snapshot", "/v1/datasets/\(Self.dataset)/manifest",
                    "/v1/datasets/\(Self.dataset)/versions/7",
                ] {
                    try await client.execute(uri: uri, method: .get, headers: [.authorization: "Bearer \(token)"]) {
                        response in
                        #expect(!response.bodyString.contains(token))
                    }
                }
            }
        }
        let text = sink.lines.withLock { $0.joined(separator: "\n") }
        #expect(!text.isEmpty)
        for secret in [
            "alice-token", "no-such-token-123", TokenScopes.hash("alice-token"), TokenScopes.hash("no-such-token-123"),
        ] {
            #expect(!text.contains(secret), "\(secret) leaked")
        }
    }
}

extension HTTPFields {
    static func + (lhs: HTTPFields, rhs: HTTPFields) -> HTTPFields {
        var out = lhs
        for field in rhs { out[field.name] = field.value }
        return out
    }
}

/// Collects every log line (message and metadata) written through it.
final class LogSink: LogHandler, @unchecked Sendable {
    let lines = Locked([String]())
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
    func log(event: LogEvent) {
        lines.withLock { $0.append("\(event.message) \(event.metadata ?? [:]) \(metadata)") }
    }
}
