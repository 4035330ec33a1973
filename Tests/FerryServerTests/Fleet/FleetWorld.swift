import FerryCore
import FerryPostgres
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging

@testable import FerryServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The fleet's tests' world: a database with templates/campgrounds.pg.sql, the tiered campgrounds published with
/// the real `ferry publish`, the real server in process (port 0) with the changes endpoint, the token checks, the
/// fleet and a status token, and real devices: client directories driven by the `ferry` binary.
struct FleetWorld: Sendable {
    static let statusToken = "fleet-status-token-0123456789"
    static let dataset = "campgrounds-tiered"
    /// Tier 0 (Alice) and tier 2 (Bob), from campgrounds.pg.sql.
    static let alice = "alice-token"
    static let bob = "bob-token"
    /// Pine Hollow, tier 0; AAA Deluxe Campground, tier 1.
    static let free = "0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e01"
    static let premium = "0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e02"

    let database: TestDatabase
    let directory: TemporaryDirectory
    let server: String
    var store: URL { directory.appending("store") }
    static var template: String {
        TestPaths.packageRoot.appendingPathComponent("templates/campgrounds-tiered.yml").path
    }

    /// Makes the database and the first version, then runs `body` against a server over them.
    static func with(
        _ label: String, configure: @Sendable (inout ServerConfiguration) -> Void = { _ in },
        _ body: @Sendable @escaping (FleetWorld) async throws -> Void
    ) async throws {
        let (database, directory) = try await prepared(label)
        defer {
            database.drop()
            directory.remove()
        }
        try await serve(database: database, directory: directory, configure: configure, body)
    }

    /// A database with templates/campgrounds.pg.sql and a store with its first version; the caller drops both.
    static func prepared(_ label: String) async throws -> (TestDatabase, TemporaryDirectory) {
        let database = try TestDatabase.create(label)
        let directory = try TemporaryDirectory("fleet-\(label)")
        do {
            try database.connect().execute(
                String(
                    contentsOf: TestPaths.packageRoot.appendingPathComponent("templates/campgrounds.pg.sql"),
                    encoding: .utf8))
            try await FleetWorld(database: database, directory: directory, server: "").publish()
        } catch {
            database.drop()
            directory.remove()
            throw error
        }
        return (database, directory)
    }

    /// A server over the world's store and database (a second call is a restart).
    static func serve(
        database: TestDatabase, directory: TemporaryDirectory,
        configure: @Sendable (inout ServerConfiguration) -> Void = { _ in },
        _ body: @Sendable @escaping (FleetWorld) async throws -> Void
    ) async throws {
        var configuration = ServerConfiguration(storePath: directory.appending("store"), port: 0)
        configuration.pollInterval = .milliseconds(100)
        configuration.statusToken = statusToken
        configuration.database = .init(
            templatePaths: [URL(fileURLWithPath: template)], databaseURL: database.url)
        configure(&configuration)
        let app = try await buildApplication(configuration, logger: Logger(label: "fleet-test"))
        try await app.test(.live) { client in
            try await body(
                FleetWorld(database: database, directory: directory, server: "http://127.0.0.1:\(client.port!)"))
        }
    }

    func publish() async throws {
        let run = try await runFerry([
            "publish", "--config", Self.template, "--store", store.path, "--database-url", database.url,
        ])
        guard run.status == 0 else { throw FerryError(.store, "ferry publish failed: \(run.stderr)") }
    }

    /// Waits (up to 10 s) until the server serves `version` to a device of `token`.
    func waitForVersion(_ version: Int, token: String = alice) async throws {
        for _ in 0..<200 {
            if let manifest = try? Manifest.decode(
                try await get("/v1/datasets/\(Self.dataset)/manifest", bearer: token).body), manifest.version >= version
            {
                return
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw FerryError(.network, "the server did not serve version \(version) within 10 s")
    }

    /// Runs `statement` in the world's database (off the cooperative pool: libpq blocks).
    func sql(_ statement: String) async throws {
        let database = self.database
        try await offCooperativePool { try database.connect().execute(statement) }
    }

    func dir(_ name: String) -> String { directory.appending(name).path }

    /// `ferry ARGUMENTS` with the device's token.
    func ferry(_ arguments: [String], token: String? = nil) async throws -> ProcessResult {
        try await runFerry(arguments + (token.map { ["--token", $0] } ?? []))
    }

    /// Downloads and applies the latest version into device `name`: its `Ferry-Device` id.
    @discardableResult
    func sync(_ name: String, token: String = alice) async throws -> String {
        let run = try await ferry(
            ["fetch", "--server", server, "--dataset", Self.dataset, "--dir", dir(name), "--apply"], token: token)
        guard run.status == 0 else { throw FerryError(.network, "ferry fetch failed: \(run.stderr)") }
        return try await deviceID(name)
    }

    func deviceID(_ name: String) async throws -> String {
        let run = try await ferry(["status", "--dir", dir(name), "--json"])
        let object = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any]
        guard let id = object?["device"] as? String else {
            throw FerryError(.notFound, "ferry status --json has no device: \(run.stdout)")
        }
        return id
    }

    /// `ferry explain` from the server, as JSON.
    func explain(_ device: String, row: String, dataset: String = dataset) async throws -> (
        run: ProcessResult, answer: RowExplanation?
    ) {
        let run = try await ferry([
            "explain", "--server", server, "--status-token", Self.statusToken, "--dataset", dataset, "--device", device,
            "--row", row, "--json",
        ])
        let answer = run.status == 0 ? try JSONDecoder().decode(RowExplanation.self, from: Data(run.stdout.utf8)) : nil
        return (run, answer)
    }

    struct Answer: Sendable {
        let status: Int
        let body: Data
    }

    func get(_ path: String, bearer: String? = nil, headers: [String: String] = [:]) async throws -> Answer {
        var request = URLRequest(url: URL(string: server + path)!)
        if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await URLSession.shared.data(for: request)
        return Answer(status: (response as? HTTPURLResponse)?.statusCode ?? 0, body: data)
    }
}
