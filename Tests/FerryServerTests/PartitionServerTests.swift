import FerryCore
import FerryMerge
import FerryPostgres
import FerryPublisher
import FerryStore
import FerryTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import FerryServer

/// Partitions on the server (docs/partitions.md): the sample in a real PostgreSQL, published by the real publisher,
/// served by the real server with the template's access query.
@Suite("Server: partitioned datasets (streams, listing, access, retired partitions)")
struct PartitionServerTests {
    static let ana: HTTPFields = [.authorization: "Bearer ana-token"]

    @Test("each stream has a dataset's read routes; the listing shows what a token may read; 401, 403, 404, 410")
    func streams() async throws {
        let database = try TestDatabase.create("partition-server")
        let directory = try TemporaryDirectory("ferry-partition-server")
        defer {
            database.drop()
            directory.remove()
        }
        try database.connect().execute(PartitionSample.sql)
        let templatePath = directory.appending("projects.yml")
        try PartitionSample.template(access: true).write(to: templatePath, atomically: true, encoding: .utf8)
        let store = directory.appending("store")
        let publisher = Publisher(
            configuration: .init(templatePath: templatePath.path, databaseURL: database.url, store: store),
            logger: Logger(label: "test"))
        try await publisher.publish()
        // An unpartitioned dataset beside it: its stream routes are 404.
        let flatPath = directory.appending("flat.yml")
        try "dataset: flat\ntables:\n  - name: checklist_items\n".write(to: flatPath, atomically: true, encoding: .utf8)
        try await Publisher(
            configuration: .init(templatePath: flatPath.path, databaseURL: database.url, store: store),
            logger: Logger(label: "test")
        ).publish()

        var log = Logger(label: "test")
        log.logLevel = .warning
        var configuration = ServerConfiguration(storePath: store, port: 0, pollInterval: .milliseconds(50))
        configuration.database = .init(templatePaths: [templatePath], databaseURL: database.url)
        let app = try await buildApplication(configuration, logger: log)
        try await app.test(.live) { client in
            let base = "/v1/datasets/projects"
            try await client.execute(uri: "/v1/datasets", method: .get) { response in
                #expect(response.bodyString.contains(#"{"dataset":"projects","partitioned":true}"#))
            }
            try await client.execute(uri: "\(base)/partitions", method: .get) { response in
                #expect(response.status == .unauthorized)
            }
            for uri in ["/v1/datasets/flat/shared/manifest", "/v1/datasets/flat/partitions/1/manifest"] {
                try await client.execute(uri: uri, method: .get) { response in
                    #expect(response.status == .notFound && response.bodyString.contains("not partitioned"), "\(uri)")
                }
            }
            try await client.execute(uri: "\(base)/partitions", method: .get, headers: Self.ana) { response in
                #expect(response.status == .ok)
                let list = try JSONDecoder().decode(PartitionList.self, from: response.bodyData)
                #expect(list.partitions.map(\.key) == ["1", "2"])
                #expect(list.partitions.allSatisfy { $0.version == 1 } && list.shared?.version == 1)
                #expect(list.access == true && list.layout.partition == .init(table: "projects", key: "id"))
                #expect(list.tables.first { $0.name == "findings" }?.parent?.column == "site_id")
            }
            // A partition's manifest names its own file; its version URL serves exactly those bytes.
            var manifest: Manifest?
            try await client.execute(uri: "\(base)/partitions/2/manifest", method: .get, headers: Self.ana) {
                response in
                #expect(response.status == .ok)
                #expect(response.header("Cache-Control")?.contains("private") == true)
                manifest = try JSONDecoder().decode(Manifest.self, from: response.bodyData)
            }
            let two = try #require(manifest)
            #expect(two.dataset == "projects" && two.tables["sites"] == 3 && two.tables["checklist_items"] == 0)
            try await client.execute(
                uri: "\(base)/partitions/2/versions/\(two.version)", method: .get, headers: Self.ana
            ) { response in
                #expect(response.status == .ok && sha256Hex(response.body) == two.sha256)
            }
            try await client.execute(uri: "\(base)/shared/manifest", method: .get, headers: Self.ana) { response in
                let shared = try JSONDecoder().decode(Manifest.self, from: response.bodyData)
                #expect(shared.tables["checklist_items"] == 5 && shared.tables["sites"] == 0)
                #expect(shared.sha256 != two.sha256)
            }
            // Another's project: 403 with the RFC 6750 challenge; a key the token may read but that has no
            // partition: 404; the dataset's own routes: 404 `partitioned`; no token: 401.
            try await client.execute(uri: "\(base)/partitions/3/manifest", method: .get, headers: Self.ana) {
                response in
                #expect(response.status == .forbidden)
                #expect(response.header("WWW-Authenticate")?.contains("insufficient_scope") == true)
            }
            try await client.execute(uri: "\(base)/partitions/99/manifest", method: .get, headers: Self.ana) {
                response in
                #expect(response.status == .notFound && response.bodyString.contains("no partition"))
            }
            try await client.execute(uri: "\(base)/manifest", method: .get, headers: Self.ana) { response in
                #expect(response.status == .notFound && response.bodyString.contains(#""code":"partitioned""#))
            }
            try await client.execute(uri: "\(base)/partitions/1/manifest", method: .get) { response in
                #expect(response.status == .unauthorized)
            }

            // Edits: only rows of the token's projects, before and after; findings through their site.
            func change(
                _ id: String, _ table: String, _ op: Change.Operation, _ key: Int, _ values: [String: JSONValue]
            )
                -> Change
            {
                Change(
                    id: id, table: table, op: op, key: ["id": .int(Int64(key))], values: values,
                    editedAt: Timestamp.format(Date()), baseUpdatedAt: nil)
            }
            let changes = [
                change("c1", "sites", .update, 4, ["name": .string("renamed")]),  // project 1: fine
                change("c2", "sites", .update, 2, ["name": .string("not mine")]),  // project 3
                change("c3", "sites", .update, 8, ["project_id": .int(3)]),  // would leave her projects
                change("c4", "sites", .update, 12, ["project_id": .int(2)]),  // moves between her projects
                change("c5", "findings", .insert, 100, ["site_id": .int(5), "note": .string("mine")]),
                change("c6", "findings", .insert, 101, ["site_id": .int(2), "note": .string("not mine")]),
            ]
            let batch = ByteBuffer(
                bytes: try JSONEncoder().encode(
                    ChangeBatch(clientId: "ana-phone", sentAt: Timestamp.format(Date()), changes: changes)))
            try await client.execute(uri: "\(base)/changes", method: .post, headers: Self.ana, body: batch) {
                response in
                let results = try JSONDecoder().decode(ChangeResults.self, from: response.bodyData).results
                #expect(
                    results.map(\.status) == [.applied, .forbidden, .forbidden, .applied, .applied, .forbidden],
                    "\(response.bodyString)")
            }
            let pg = try database.connect()
            #expect(
                try pg.query("SELECT project_id::text FROM sites WHERE id IN (8, 12) ORDER BY id") == [["1"], ["2"]])
            #expect(try pg.query("SELECT count(*)::text FROM findings WHERE id >= 100") == [["1"]])

            // Project 2 is archived: its partition is retired (410), the others are served on.
            try database.connect().execute("UPDATE projects SET archived = true WHERE id = 2")
            try await publisher.publish()
            let deadline = ContinuousClock.now + .seconds(20)
            var status = HTTPResponse.Status.ok
            while status == .ok, ContinuousClock.now < deadline {
                try await client.execute(uri: "\(base)/partitions/2/manifest", method: .get, headers: Self.ana) {
                    response in
                    status = response.status
                    if status == .gone { #expect(response.bodyString.contains("retired")) }
                }
                if status == .ok { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(status == .gone)
            try await client.execute(uri: "\(base)/partitions/1/manifest", method: .get, headers: Self.ana) {
                response in
                #expect(response.status == .ok)
            }
        }
    }
}
