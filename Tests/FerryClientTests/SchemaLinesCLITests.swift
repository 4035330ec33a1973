import FerryCore
import FerryPostgres
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The issue's end to end, from the CLI, against real PostgreSQL and `ferry serve`: the shipped trips templates in
/// two schema lines (templates/trips.v1.yml and trips.v2.yml over trips.pg.sql + trips.v2.pg.sql). An old device
/// (accepts 1) and a new one (accepts 1 and 2) each fetch, update by patch and push, and PostgreSQL gets each edit
/// through its own line's mapping.
@Suite struct SchemaLinesCLITests {
    static let templates = TestPaths.packageRoot.appendingPathComponent("templates")

    func json(_ result: ProcessResult) throws -> [String: Any] {
        let line = result.stdout.split(separator: "\n").last.map(String.init) ?? ""
        return try #require(
            try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
            "\(result.stdout)\n\(result.stderr)")
    }

    @Test func anOldAndANewDeviceEachFetchPatchAndPushThroughTheirOwnLine() async throws {
        let database = try TestDatabase.create("lines_cli")
        defer { database.drop() }
        let temp = try TemporaryDirectory("ferry-lines-cli")
        defer { temp.remove() }
        let pg = try database.connect()
        for file in ["trips.pg.sql", "trips.v2.pg.sql"] {
            try pg.execute(try String(contentsOf: Self.templates.appendingPathComponent(file), encoding: .utf8))
        }
        let store = temp.appending("store")
        let configs = ["trips.v1.yml", "trips.v2.yml"].flatMap {
            ["--config", Self.templates.appendingPathComponent($0).path]
        }
        let publish = ["publish", "--database-url", database.url, "--store", store.path] + configs
        let published = try await runFerry(publish)
        #expect(published.status == 0, "\(published.stderr)")
        let server = try await ServeProcess(store: store, arguments: configs + ["--database-url", database.url])
        defer { server.kill9() }
        let url = server.url.absoluteString
        let old = temp.appending("old").path
        let new = temp.appending("new").path
        func sync(_ dir: String, _ accept: [String]) async throws -> [String: Any] {
            let run = try await runFerry(
                ["fetch", "--server", url, "--dataset", "trips", "--dir", dir, "--apply", "--json"]
                    + accept.flatMap { ["--accept-schema", $0] })
            #expect(run.status == 0, "\(run.stderr)")
            return try json(run)
        }
        func exec(_ dir: String, _ sql: String) async throws -> String {
            let run = try await runFerry(["exec", "--dir", dir, "--json", sql])
            #expect(run.status == 0, "\(sql): \(run.stderr)")
            return run.stdout
        }
        func push(_ dir: String) async throws -> [String: Any] {
            let run = try await runFerry(["push", "--server", url, "--dataset", "trips", "--dir", dir, "--json"])
            #expect(run.status == 0, "\(run.stderr)")
            return try json(run)
        }
        func row(_ name: String) throws -> [String?] {
            try pg.query(
                "SELECT passengers::text, luggage::text, seats::text FROM trips WHERE name = $1", [name]
            ).first ?? []
        }

        // Each device gets its own line: the old one the old shape (bags, no seats), the new one every column.
        _ = try await sync(old, ["1"])
        _ = try await sync(new, ["1", "2"])
        #expect(try await exec(old, "SELECT dataset FROM ferry_snapshot").contains("trips.v1"))
        #expect(try await exec(new, "SELECT dataset FROM ferry_snapshot").contains("trips.v2"))
        #expect(try await exec(old, "SELECT bags FROM trips WHERE name = 'Göteborg-Malmö'").contains("[[3]]"))
        #expect(
            try await exec(new, "SELECT luggage, seats FROM trips WHERE name = 'Göteborg-Malmö'").contains("[[3,4]]"))

        // A change in PostgreSQL reaches both by a patch within each line.
        try pg.execute(
            #"UPDATE trips SET passengers = 5, "updatedAt" = now() WHERE name = 'Kalmar-Öland'"#)
        #expect(try await runFerry(publish).status == 0)
        let serving = try await waitForVersion(url, "trips.v2", 2)
        #expect(serving)
        #expect(try await sync(old, ["1"])["path"] as? String == "patch")
        #expect(try await sync(new, ["1", "2"])["path"] as? String == "patch")

        // Edits in each shape. The new device sets seats; once that is published, the old device (its line has no
        // seats) edits the same trip's bags: they land in luggage and leave seats as they are. Its insert gets the
        // default seats.
        _ = try await exec(new, "UPDATE trips SET seats = 2 WHERE name = 'Göteborg-Malmö'")
        #expect(try await push(new)["applied"] as? Int == 1)
        #expect(try await runFerry(publish).status == 0)
        #expect(try await waitForVersion(url, "trips.v2", 3))
        _ = try await sync(old, ["1"])
        _ = try await sync(new, ["1", "2"])
        _ = try await exec(old, "UPDATE trips SET bags = 7 WHERE name = 'Göteborg-Malmö'")
        _ = try await exec(
            old,
            "INSERT INTO trips(id, name, passengers, bags) VALUES ('7a1f6c1e-2d7b-4c55-9a7e-0c5d7e1b0010', 'Kalmar-Visby', 1, 2)"
        )
        #expect(try await push(old)["applied"] as? Int == 2)
        #expect(try row("Göteborg-Malmö")[1...] == ["7", "2"])
        #expect(try row("Kalmar-Visby") == ["1", "2", "4"])

        // A conflict between the lines follows the table's rule (newest-wins): both edit the same trip offline; the
        // newer edit, pushed first, is applied, and the older one is rejected.
        _ = try await exec(old, "UPDATE trips SET passengers = 11 WHERE name = 'Växjö-Kalmar'")
        try await Task.sleep(for: .milliseconds(20))
        _ = try await exec(new, "UPDATE trips SET passengers = 12 WHERE name = 'Växjö-Kalmar'")
        #expect(try await push(new)["applied"] as? Int == 1)
        #expect(try await push(old)["rejected"] as? Int == 1)
        #expect(try row("Växjö-Kalmar")[0] == "12")
        #expect(try await exec(old, "SELECT passengers FROM trips WHERE name = 'Växjö-Kalmar'").contains("[[12]]"))
    }

    /// Waits up to 20 s for the server to serve `version` of `line`.
    func waitForVersion(_ server: String, _ line: String, _ version: Int) async throws -> Bool {
        try await ServeProcess.waitForVersion(server, line, version)
    }
}
