import FerryCore
import FerryPostgres
import FerryPublisher
import FerryServer
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@testable import FerryClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Partitions end to end (docs/partitions.md, docs/client.md "Partitions: subscriptions"): the sample projects in a
/// real PostgreSQL (20 projects), published by the real publisher, served by the real server, read by real client
/// directories (the library, and the `ferry` binary for the CLI and the kill -9 drills).
@Suite struct PartitionClientTests {
    struct World: Sendable {
        let database: TestDatabase
        let directory: TemporaryDirectory
        let templatePath: String
        let server: URL

        func publish() async throws {
            _ = try await Publisher(
                configuration: .init(
                    templatePath: templatePath, databaseURL: database.url, store: directory.appending("store")),
                logger: .test
            ).publish()
        }

        func postgres(_ sql: String) throws { try database.connect().execute(sql) }

        func rows(_ sql: String) throws -> [String] {
            try database.connect().query(sql, []).map { $0.first.flatMap { $0 } ?? "" }
        }

        func configuration(_ name: String, token: String? = nil) -> FerryClient.Configuration {
            var configuration = FerryClient.Configuration(
                directory: directory.appending(name), serverURL: server, dataset: "projects")
            configuration.setAccessToken(token)
            configuration.push.onOpen = false
            configuration.push.backoff = .milliseconds(10)
            return configuration
        }

        func client(_ name: String, token: String? = nil) async throws -> FerryClient {
            try await FerryClient.open(configuration: configuration(name, token: token), logger: .test)
        }

        /// The partition listing (the versions of every stream), as the server serves it now.
        func listing(token: String? = nil) async throws -> PartitionList {
            var request = URLRequest(url: server.appendingPathComponent("v1/datasets/projects/partitions"))
            if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
            let (data, _) = try await URLSession.shared.data(for: request)
            return try JSONDecoder().decode(PartitionList.self, from: data)
        }

        /// Changes PostgreSQL with `sql`, publishes, and waits until the server serves the new versions.
        func change(_ sql: String, token: String? = nil) async throws {
            let before = try await listing(token: token)
            try postgres(sql)
            try await publish()
            for _ in 0..<200 {
                if try await listing(token: token) != before { return }
                try await Task.sleep(for: .milliseconds(25))
            }
            throw FerryError(.network, "the server did not serve the new versions within 5 s")
        }
    }

    /// 20 projects: the sample's 4 (3 sites each), and 16 more with 10 sites each, one finding per site.
    static let moreProjects = """
        INSERT INTO projects SELECT g, 'project ' || g FROM generate_series(5, 20) g;
        INSERT INTO sites (id, project_id, name) SELECT g, g / 10, 'site ' || g FROM generate_series(50, 209) g;
        INSERT INTO findings (id, site_id, note) SELECT g, g - 1000, 'finding ' || g FROM generate_series(1050, 1209) g;
        """

    func withWorld(access: Bool = false, _ body: @Sendable @escaping (World) async throws -> Void) async throws {
        let database = try TestDatabase.create("partition-client")
        let directory = try TemporaryDirectory("ferry-partition-client")
        defer {
            database.drop()
            directory.remove()
        }
        try database.connect().execute(PartitionSample.sql + Self.moreProjects)
        let templatePath = directory.appending("projects.yml")
        try PartitionSample.template(access: access).write(to: templatePath, atomically: true, encoding: .utf8)
        let store = directory.appending("store")
        _ = try await Publisher(
            configuration: .init(templatePath: templatePath.path, databaseURL: database.url, store: store),
            logger: .test
        ).publish()
        var configuration = ServerConfiguration(storePath: store, port: 0, pollInterval: .milliseconds(25))
        configuration.database = .init(templatePaths: [templatePath], databaseURL: database.url)
        let app = try await buildApplication(configuration, logger: .test)
        try await app.test(.live) { client in
            try await body(
                World(
                    database: database, directory: directory, templatePath: templatePath.path,
                    server: URL(string: "http://127.0.0.1:\(client.port!)")!))
        }
    }

    static func deviceRows(_ client: FerryClient, _ sql: String) async throws -> [String] {
        try await client.withDatabase { db in
            try db.query(sql).map { row in row.first?.text ?? row.first?.integer.map(String.init) ?? "" }
        }
    }

    /// The device's sites, findings and projects equal PostgreSQL's rows of `projects`, and the shared checklist is
    /// whole.
    static func expectEqual(_ client: FerryClient, _ world: World, projects: [Int]) async throws {
        let list = projects.map(String.init).joined(separator: ", ")
        let sites = "SELECT id || '|' || project_id || '|' || name FROM sites"
        #expect(
            try await deviceRows(client, "\(sites) ORDER BY id")
                == world.rows("\(sites) WHERE project_id IN (\(list)) ORDER BY id"))
        let findings = "SELECT f.id || '|' || f.site_id || '|' || f.note FROM findings f"
        #expect(
            try await deviceRows(client, "\(findings) ORDER BY f.id")
                == world.rows(
                    "\(findings) JOIN sites s ON s.id = f.site_id WHERE s.project_id IN (\(list)) ORDER BY f.id"))
        #expect(try await deviceRows(client, "SELECT id FROM projects ORDER BY id") == projects.map(String.init))
        #expect(try await deviceRows(client, "SELECT count(*) FROM checklist_items") == ["5"])
    }

    @Test(
        "2 of 20 projects: exactly their rows plus the shared table; another project's change moves no byte; its own moves one patch; moved rows leave and arrive"
    )
    func twoOfTwenty() async throws {
        try await withWorld { world in
            let device = try await world.client("device")
            // A fetch before any subscription says what to do.
            let unsubscribed = await #expect(throws: FerryError.self) { try await device.checkForUpdates() }
            #expect(unsubscribed?.message.contains("is partitioned: subscribe") == true)
            try await device.subscribe(["1", "2"])
            #expect(try await device.checkForUpdates().outcome == .initialSync)
            try await Self.expectEqual(device, world, projects: [1, 2])
            let status = try await device.status()
            #expect(status.partitions?.map(\.key) == ["1", "2"])
            #expect(status.partitions?.first?.rows == 1 + 3 + 6)

            // A change in another project: every stream answers 304.
            try await world.change("UPDATE sites SET name = 'changed' WHERE id = 71")
            let other = try await device.checkForUpdates()
            #expect(other.outcome == .notModified)
            #expect(other.check.bytesReceived == 0)

            // A change in its own: one patch, to project 1's stream.
            try await world.change("UPDATE sites SET name = 'renamed' WHERE id = 8")
            let own = try await device.checkForUpdates()
            #expect(own.outcome == .updateDownloaded)
            let stream = try await FerryClient.status(
                directory: ClientDirectory(world.directory.appending("device")).directory(of: .partition("1")).url)
            guard case .patch = stream.path else {
                Issue.record("project 1's stream did not take a patch: \(String(describing: stream.path))")
                return
            }
            try await device.applyPendingUpdate()
            try await Self.expectEqual(device, world, projects: [1, 2])

            // Site 4 moves from project 1 to project 7 (leaves), site 70 from project 7 to project 2 (arrives).
            try await world.change(
                "UPDATE sites SET project_id = 7 WHERE id = 4; UPDATE sites SET project_id = 2 WHERE id = 70")
            #expect(try await device.checkForUpdates().outcome == .updateDownloaded)
            try await device.applyPendingUpdate()
            try await Self.expectEqual(device, world, projects: [1, 2])
            #expect(try await Self.deviceRows(device, "SELECT id FROM sites WHERE id IN (4, 70)") == ["70"])
            await device.close()
        }
    }

    @Test("a damaged partition download never reaches database.db, and the other partitions still update")
    func damagedPartition() async throws {
        try await withWorld { world in
            let device = try await world.client("device")
            try await device.subscribe(["1", "2"])
            _ = try await device.checkForUpdates()
            let before = try await Self.deviceRows(device, "SELECT name FROM sites WHERE id IN (5, 8) ORDER BY id")

            // Both projects change; every object project 2's manifest names (its versions, its patches) is damaged.
            try await world.change(
                "UPDATE sites SET name = 'new 5' WHERE id = 5; UPDATE sites SET name = 'new 8' WHERE id = 8")
            let url = world.server.appendingPathComponent("v1/datasets/projects/partitions/2/manifest")
            let manifest = String(decoding: try await URLSession.shared.data(from: url).0, as: UTF8.self)
            let named = Set(
                manifest.matches(of: /[0-9a-f]{64}/).map { String($0.output) })
            let objects = world.directory.appending("store/projects/objects")
            for name in try FileManager.default.contentsOfDirectory(atPath: objects.path)
            where named.contains(String(name.prefix(64))) {
                let file = objects.appendingPathComponent(name)
                var bytes = try Data(contentsOf: file)
                for i in stride(from: bytes.count / 3, to: bytes.count - 8, by: 97) { bytes[i] ^= 0x5A }
                try bytes.write(to: file)
            }

            let damaged = await #expect(throws: FerryError.self) { try await device.checkForUpdates() }
            #expect(damaged?.message.contains("partition '2'") == true, "\(String(describing: damaged))")
            try await device.applyPendingUpdate()
            #expect(
                try await Self.deviceRows(device, "SELECT name FROM sites WHERE id IN (5, 8) ORDER BY id")
                    == [before[0], "new 8"])
            #expect(try await device.status().partitions?.map(\.version) == [2, 1])
            await device.close()
        }
    }

    @Test("subscribe and unsubscribe change the rows at the next update; a queued edit's row stays until answered")
    func subscribeAndUnsubscribe() async throws {
        try await withWorld { world in
            let device = try await world.client("device")
            try await device.subscribe(["1"])
            _ = try await device.checkForUpdates()
            let projectTwo = "SELECT id FROM sites WHERE project_id = 2 ORDER BY id"

            try await device.subscribe(["2"])
            #expect(try await Self.deviceRows(device, projectTwo).isEmpty)  // nothing until the next update
            _ = try await device.checkForUpdates()
            try await device.applyPendingUpdate()
            try await Self.expectEqual(device, world, projects: [1, 2])

            // An edit of site 5 (project 2) is queued; the device leaves project 2.
            _ = try await device.withDatabase { db in try db.run("UPDATE sites SET name = 'mine' WHERE id = 5") }
            try await device.unsubscribe(["2"])
            #expect(await device.subscriptions == ["1"])
            #expect(try await Self.deviceRows(device, projectTwo) == ["1", "5", "9"])  // nothing until the next update
            _ = try await device.checkForUpdates()
            try await device.applyPendingUpdate()
            #expect(try await Self.deviceRows(device, projectTwo) == ["5"])
            #expect(try await Self.deviceRows(device, "SELECT name FROM sites WHERE id = 5") == ["mine"])
            #expect(try await Self.deviceRows(device, "SELECT count(*) FROM findings WHERE site_id = 5") == ["0"])

            // Once the edit is answered, the row leaves too, and project 2's stream is dropped.
            let pushed = try await device.push()
            #expect(pushed.sent == 1 && pushed.remaining == 0)
            #expect(try world.rows("SELECT name FROM sites WHERE id = 5") == ["mine"])
            _ = try await device.checkForUpdates()
            try await device.applyPendingUpdate()
            #expect(try await Self.deviceRows(device, projectTwo).isEmpty)
            try await Self.expectEqual(device, world, projects: [1])
            let streams = ClientDirectory(world.directory.appending("device")).directory(of: .partition("2"))
            #expect(!FileManager.default.fileExists(atPath: streams.url.path))

            // A subscribed partition retired on the server (410): the error says to unsubscribe; the rest stays.
            try await device.subscribe(["3"])
            _ = try await device.checkForUpdates()
            try await device.applyPendingUpdate()
            try await world.change("UPDATE projects SET archived = true WHERE id = 3")
            let retired = await #expect(throws: FerryError.self) { try await device.checkForUpdates() }
            #expect(retired?.code == .partitionRetired)
            #expect(retired?.message.contains("partition '3'") == true)
            try await Self.expectEqual(device, world, projects: [1, 3])
            try await device.unsubscribe(["3"])
            _ = try await device.checkForUpdates()
            try await device.applyPendingUpdate()
            try await Self.expectEqual(device, world, projects: [1])
            await device.close()
        }
    }

    @Test("a forbidden partition is 403 and changes nothing; an unknown key is a clear error; the CLI says so too")
    func forbiddenAndUnknown() async throws {
        try await withWorld(access: true) { world in
            let ana = try await world.client("ana", token: "ana-token")
            try await ana.subscribe(["1"])
            let forbidden = await #expect(throws: FerryError.self) { try await ana.subscribe(["3"]) }
            #expect(forbidden?.code == .unauthorized)
            #expect(forbidden?.message.contains("403") == true)
            let unknown = await #expect(throws: FerryError.self) { try await ana.subscribe(["99"]) }
            #expect(unknown?.code == .notFound)
            #expect(unknown?.message.contains("no partition '99'") == true)
            #expect(await ana.subscriptions == ["1"])
            _ = try await ana.checkForUpdates()
            try await Self.expectEqual(ana, world, projects: [1])
            await ana.close()

            // The CLI: the same refusal, exit 1, nothing changed; status --json lists the partition.
            let dir = world.directory.appending("ana").path
            let cli = [
                "subscribe", "--server", world.server.absoluteString, "--dataset", "projects", "--dir", dir,
                "--token", "ana-token",
            ]
            let refused = try await runFerry(cli + ["3"])
            #expect(refused.status == 1 && refused.stderr.contains("403"), "\(refused.stderr)")
            let status = try await runFerry(["status", "--dir", dir, "--json"])
            #expect(status.stdout.contains(#""partitions":[{"key":"1","rows":10,"version":1}]"#), "\(status.stdout)")
            let added = try await runFerry(cli + ["2", "--json"])
            #expect(added.stdout == #"{"subscriptions":["1","2"]}"# + "\n", "\(added.stderr)")
            let gone = try await runFerry(["unsubscribe", "--dir", dir, "7"])
            #expect(gone.status == 1 && gone.stderr.contains("'7'"), "\(gone.stderr)")
        }
    }

    @Test("kill -9 during a subscription's download and during its apply leaves the previous good state")
    func killDuringSubscription() async throws {
        try await withWorld { world in
            let dir = ClientDirectory(world.directory.appending("device"))
            let fetch = [
                "fetch", "--server", world.server.absoluteString, "--dataset", "projects", "--dir", dir.url.path,
            ]
            let subscribe = [
                "subscribe", "--server", world.server.absoluteString, "--dataset", "projects", "--dir", dir.url.path,
            ]
            #expect(try await runFerry(subscribe + ["1"]).status == 0)
            #expect(try await runFerry(fetch).status == 0)
            let before = try FileDigest.sha256Hex(of: dir.database)
            let projects = "SELECT group_concat(id) FROM (SELECT DISTINCT project_id AS id FROM sites ORDER BY 1)"

            // Killed while project 12's stream downloads (rate-limited): database.db is exactly what it was.
            #expect(try await runFerry(subscribe + ["12"]).status == 0)
            let partial = dir.directory(of: .partition("12"))
            #expect(
                try await ClientProcessTests().runAndKill(fetch + ["--limit-rate", "64"], after: 0) {
                    partial.exists(partial.partialRecord)
                })
            #expect(try FileDigest.sha256Hex(of: dir.database) == before)
            #expect(!dir.exists(dir.updated))

            // Killed at random instants of the download, the composition and the swap: always one good state.
            for round in 0..<5 {
                _ = try await ClientProcessTests().runAndKill(
                    fetch + ["--apply"], after: Double(round) * 0.1 + Double.random(in: 0..<0.15))
                let db = try SQLiteConnection(path: dir.database.path, mode: .readWrite)
                try db.checkIntegrity()
                let held = try db.scalar(projects)?.text
                #expect(held == "1" || held == "1,12", "round \(round): \(held ?? "nil")")
            }
            let finished = try await runFerry(fetch + ["--apply"])
            #expect(finished.status == 0, "\(finished.stderr)")
            let device = try await world.client("device")
            try await Self.expectEqual(device, world, projects: [1, 12])
            await device.close()
        }
    }
}
