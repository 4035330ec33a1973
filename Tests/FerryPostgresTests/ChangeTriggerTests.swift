import FerryCore
import FerryTestSupport
import Foundation
import Testing

@testable import FerryPostgres

/// `ferry triggers install|remove` and the LISTEN connection, on real PostgreSQL (docs/freshness.md).
@Suite("Change triggers and LISTEN", .serialized)
struct ChangeTriggerTests {
    static let sql =
        "CREATE TABLE t (id integer PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a'); CREATE TABLE other (id integer PRIMARY KEY);"

    /// A fresh database with `sql`, a directory for templates, and `body`; both removed afterwards.
    func withDatabase(_ label: String, _ body: (TestDatabase, TemporaryDirectory) async throws -> Void) async throws {
        let database = try TestDatabase.create(label)
        let directory = try TemporaryDirectory("ferry-\(label)")
        defer {
            database.drop()
            directory.remove()
        }
        try database.connect().execute(Self.sql)
        try await body(database, directory)
    }

    func template(_ yaml: String, in directory: TemporaryDirectory, name: String = "t.yml") throws -> Template {
        let path = directory.appending(name).path
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return try Template.load(path: path)
    }

    /// `pg_dump --schema-only` of `database`, without the lines that differ between two runs.
    func schemaDump(_ database: TestDatabase) async throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/lib/postgresql/15/bin/pg_dump")
        process.arguments = ["--schema-only", "--no-owner", database.url]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        await process.waitForExit()
        #expect(process.terminationStatus == 0)
        // pg_dump 15.14+ brackets its output with \restrict and \unrestrict and a random key per run
        return String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.hasPrefix("\\restrict ") && !$0.hasPrefix("\\unrestrict ") }.joined(separator: "\n")
    }

    @Test("triggers install twice changes nothing, and remove leaves the schema as it was (pg_dump --schema-only)")
    func installIsIdempotentAndRemoveRestores() async throws {
        try await withDatabase("triggers") { database, directory in
            let template = try template("dataset: onchange\ntables: [{name: t}]\n", in: directory)
            let pg = try database.connect()
            let before = try await schemaDump(database)
            #expect(try ChangeTriggers.install(template, on: pg) == ["t"])
            let installed = try await schemaDump(database)
            #expect(installed != before)
            #expect(installed.contains("CREATE FUNCTION public.ferry_notify()"))
            #expect(
                installed.contains(
                    "CREATE TRIGGER ferry_notify_onchange AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON public.t"))
            try ChangeTriggers.install(template, on: pg)
            #expect(try await schemaDump(database) == installed)
            #expect(try ChangeTriggers.installed(template, on: pg) == ["public.t"])
            try ChangeTriggers.remove(template, on: pg)
            #expect(try await schemaDump(database) == before)
            // Removing again is harmless
            try ChangeTriggers.remove(template, on: pg)
            #expect(try await schemaDump(database) == before)
        }
    }

    @Test("the function stays while another dataset's triggers use it")
    func functionSharedByDatasets() async throws {
        try await withDatabase("triggers2") { database, directory in
            let one = try template("dataset: onchange\ntables: [{name: t}]\n", in: directory)
            let two = try template("dataset: second\ntables: [{name: other}]\n", in: directory, name: "second.yml")
            let pg = try database.connect()
            try ChangeTriggers.install(one, on: pg)
            try ChangeTriggers.install(two, on: pg)
            try ChangeTriggers.remove(one, on: pg)
            #expect(try pg.query("SELECT count(*) FROM pg_proc WHERE proname = 'ferry_notify'").first?.first == "1")
            #expect(try ChangeTriggers.installed(two, on: pg) == ["public.other"])
            try ChangeTriggers.remove(two, on: pg)
            #expect(try pg.query("SELECT count(*) FROM pg_proc WHERE proname = 'ferry_notify'").first?.first == "0")
        }
    }

    @Test("a dataset name too long for a trigger name is refused, naming the key")
    func longDatasetName() async throws {
        try await withDatabase("triggers3") { database, directory in
            let long = String(repeating: "d", count: 60)
            let template = try template("dataset: \(long)\ntables: [{name: t}]\n", in: directory)
            let error = #expect(throws: FerryError.self) {
                try ChangeTriggers.install(template, on: try database.connect())
            }
            #expect(error?.code == .badTemplate && error?.key == "dataset")
        }
    }

    @Test(
        "the listener yields each committed statement's table, nothing for a rollback, and comes back after its connection is killed"
    )
    func listener() async throws {
        try await withDatabase("listen") { database, directory in
            let template = try template("dataset: onchange\ntables: [{name: t}]\n", in: directory)
            let pg = try database.connect()
            try ChangeTriggers.install(template, on: pg)
            var events = PostgresListener.events(url: database.url, channel: ChangeTriggers.channel(for: "onchange"))
                .makeAsyncIterator()
            #expect(await events.next() == .listening(reconnected: false))
            try pg.execute("BEGIN; UPDATE t SET v = 'rolled back'; ROLLBACK;")
            try pg.execute("UPDATE t SET v = 'b'")
            #expect(await events.next() == .notification("public.t"))
            // Killed from the server side: lost, then listening again
            _ = try pg.query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
                [PostgresListener.applicationName])
            guard case .lost = await events.next() else {
                Issue.record("expected the connection to be reported lost")
                return
            }
            #expect(await events.next() == .listening(reconnected: true))
            try pg.execute("TRUNCATE t")
            #expect(await events.next() == .notification("public.t"))
        }
    }
}
