import FerryCore
import FerryStore
import Foundation
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

#if canImport(Glibc)
    import Glibc
#endif

/// `ferry publish` and `ferry schedule` through the built binary.
@Suite("Publisher CLI")
struct PublishCLITests {
    static let sql = "CREATE TABLE t (id integer PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a'), (2, 'b');"

    @Test("--json prints one object with exactly the documented keys")
    func jsonGolden() async throws {
        let fixture = try PublisherFixture("clijson", sql: Self.sql)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate("dataset: cli\ntables: [{name: t}]\n")
        let args = [
            "publish", "--config", template, "--database-url", fixture.database.url, "--store", fixture.store.path,
            "--json",
        ]

        let run = try await runFerry(args)
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n")
        #expect(lines.count == 1)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
        #expect(
            Set(object.keys) == [
                "contentDigest", "createdAt", "dataset", "gzipSize", "schemaVersion", "seconds", "sha256", "size",
                "tables", "unchanged", "version",
                "versions", "phases",
            ])
        // phases: seconds per step, named as PublishPhase spells them; a publish that stores a version ran them all but
        // patches.
        let phases = try #require(object["phases"] as? [String: Double])
        #expect(Set(phases.keys).isSubset(of: Set(PublishPhase.allCases.map(\.rawValue))))
        #expect(["extract", "indexes", "commit", "analyze", "store", "manifest"].allSatisfy { phases[$0] != nil })
        #expect(phases.values.allSatisfy { $0 >= 0 })
        #expect(
            object["dataset"] as? String == "cli" && object["version"] as? Int == 1
                && object["unchanged"] as? Bool == false)
        #expect((object["tables"] as? [String: Int]) == ["t": 2])

        let again = try await runFerry(args)
        #expect(again.status == 0)
        let second = try #require(try JSONSerialization.jsonObject(with: Data(again.stdout.utf8)) as? [String: Any])
        #expect(second["unchanged"] as? Bool == true && second["version"] as? Int == 1)
        // Unchanged data is extracted but not stored again.
        let secondPhases = try #require(second["phases"] as? [String: Double])
        #expect(secondPhases["extract"] != nil && secondPhases["store"] == nil)
        // It was compared with version 1 row by row: `incremental` counts the rows.
        #expect(
            (second["incremental"] as? [String: Int]) == ["unchanged": 2, "updated": 0, "inserted": 0, "deleted": 0])

        // A changed row: version 2 is built from version 1; with --full from scratch, without `incremental`.
        try fixture.execute("UPDATE t SET v = 'changed' WHERE id = 2")
        let third = try #require(
            try JSONSerialization.jsonObject(with: Data(try await runFerry(args).stdout.utf8)) as? [String: Any])
        #expect(
            third["version"] as? Int == 2
                && (third["incremental"] as? [String: Int]) == [
                    "unchanged": 1, "updated": 1, "inserted": 0, "deleted": 0,
                ])
        let text = try await runFerry(Array(args.dropLast()) + ["--full"])
        #expect(
            text.status == 0 && text.stdout.contains("unchanged since version 2") && !text.stdout.contains("built "),
            "\(text.stdout)")
        try fixture.execute("INSERT INTO t VALUES (3, 'new')")
        let built = try await runFerry(Array(args.dropLast()))
        #expect(
            built.stdout.contains(
                "built      from the current version: 2 rows kept, 0 rewritten, 1 inserted, 0 deleted"),
            "\(built.stdout)")
        try fixture.execute("UPDATE t SET v = 'again' WHERE id = 3")
        let full = try #require(
            try JSONSerialization.jsonObject(with: Data(try await runFerry(args + ["--full"]).stdout.utf8))
                as? [String: Any])
        #expect(
            full["version"] as? Int == 4 && full["incremental"] == nil
                && (full["phases"] as? [String: Double])?["indexes"] != nil)
    }

    @Test("human output; DATABASE_URL fallback; --keep; progress stays off when stderr is not a terminal")
    func humanOutput() async throws {
        let fixture = try PublisherFixture("clihuman", sql: Self.sql)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate("dataset: cli\ntables: [{name: t}]\n")
        for value in ["c", "d"] {
            try fixture.execute("UPDATE t SET v = '\(value)' WHERE id = 1")
            let run = try await runFerry(
                [
                    "publish", "--config", template, "--store", fixture.store.path, "--keep", "1", "--checkpoint-at",
                    "0",
                    "--patch-horizon", "0",
                ],
                environment: ["DATABASE_URL": fixture.database.url])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(
                run.stdout.contains("published version") && run.stdout.contains("sha256") && run.stdout.contains("t=2"))
            #expect(!run.stderr.contains("rows/s"))
        }
        #expect(try fixture.storeAccess.manifest(for: "cli")?.versions == [2])
        let unchanged = try await runFerry(
            ["publish", "--config", template, "--store", fixture.store.path],
            environment: ["DATABASE_URL": fixture.database.url])
        #expect(unchanged.status == 0 && unchanged.stdout.contains("unchanged"))
    }

    @Test("failures exit non-zero with one reason on stderr and never the password")
    func failures() async throws {
        let fixture = try PublisherFixture("clifail", sql: Self.sql)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate("dataset: cli\ntables: [{name: t}]\n")

        let badURL = try await runFerry([
            "publish", "--config", template, "--store", fixture.store.path, "--database-url",
            "postgres://ferry:hunter2-secret@127.0.0.1:1/app",
        ])
        #expect(badURL.status == 1)
        #expect(
            badURL.stderr.contains("cannot connect to PostgreSQL") && badURL.stderr.contains("ferry:***@127.0.0.1:1"))
        #expect(!badURL.stderr.contains("hunter2-secret") && !badURL.stdout.contains("hunter2-secret"))

        let envURL = try await runFerry(
            ["publish", "--config", template, "--store", fixture.store.path],
            environment: ["DATABASE_URL": "postgres://ferry:hunter2-secret@127.0.0.1:1/app"])
        #expect(envURL.status == 1 && !envURL.stderr.contains("hunter2-secret"))

        let noURL = try await runFerry(
            ["publish", "--config", template, "--store", fixture.store.path], environment: ["DATABASE_URL": ""])
        #expect(noURL.status != 0 && noURL.stderr.contains("--database-url"))

        let badTemplate = try fixture.writeTemplate("dataset: cli\ntabels: []\n", name: "bad.yml")
        let bad = try await runFerry([
            "publish", "--config", badTemplate, "--store", fixture.store.path, "--database-url", fixture.database.url,
        ])
        #expect(bad.status == 1 && bad.stderr.contains(badTemplate) && bad.stderr.contains("did you mean `tables`"))

        let keep = try await runFerry([
            "publish", "--config", template, "--keep", "0", "--database-url", fixture.database.url,
        ])
        #expect(keep.status != 0 && keep.status != 1 && keep.stderr.contains("--keep"))

        let every = try await runFerry([
            "schedule", "--config", template, "--every", "15x", "--database-url", fixture.database.url,
        ])
        #expect(every.status != 0 && every.stderr.contains("s, m or h"))
    }

    @Test("a second publish while the lock is held fails clearly")
    func lockedStore() async throws {
        let fixture = try PublisherFixture("clilock", sql: Self.sql)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate("dataset: cli\ntables: [{name: t}]\n")
        let held = try fixture.storeAccess.lock(dataset: "cli", wait: false)
        defer { held.unlock() }
        let run = try await runFerry([
            "publish", "--config", template, "--store", fixture.store.path, "--database-url", fixture.database.url,
        ])
        #expect(run.status == 1)
        #expect(run.stderr.contains("another ferry process"))
    }

    @Test("ferry schedule publishes, then stops on SIGTERM")
    func scheduleStopsOnSIGTERM() async throws {
        let fixture = try PublisherFixture("clisched", sql: Self.sql)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate("dataset: cli\ntables: [{name: t}]\n")
        let process = Process()
        process.executableURL = TestPaths.ferryBinary
        process.arguments = [
            "schedule", "--config", template, "--store", fixture.store.path, "--database-url", fixture.database.url,
            "--every", "1h",
        ]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(30)
        while try fixture.storeAccess.manifest(for: "cli") == nil && Date() < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(try fixture.storeAccess.manifest(for: "cli")?.version == 1)
        kill(process.processIdentifier, SIGTERM)
        await process.waitForExit()
        #expect(process.terminationReason == .exit && process.terminationStatus == 0)
    }

    @Test(
        "ferry triggers install (twice) and ferry schedule --on-change: a commit publishes a new version; SIGTERM stops it; remove takes the triggers away"
    )
    func scheduleOnChange() async throws {
        let fixture = try PublisherFixture("clionchange", sql: Self.sql)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate("dataset: clichange\ntables: [{name: t}]\n")
        let database = ["--config", template, "--database-url", fixture.database.url]
        for _ in 0..<2 {
            let install = try await runFerry(["triggers", "install"] + database)
            #expect(install.status == 0, "\(install.stderr)")
            #expect(
                install.stdout.contains(
                    "installed trigger ferry_notify_clichange on 1 table, notifying channel ferry_clichange"),
                "\(install.stdout)")
            #expect(install.stdout.contains("covered: t"), "\(install.stdout)")
        }
        let badDuration = try await runFerry(
            ["schedule", "--on-change", "--debounce", "half a second", "--store", fixture.store.path] + database)
        #expect(badDuration.status == 2 && badDuration.stderr.contains("500ms"), "\(badDuration.stderr)")
        let neither = try await runFerry(["schedule", "--store", fixture.store.path] + database)
        #expect(neither.status == 2 && neither.stderr.contains("--on-change"), "\(neither.stderr)")

        let process = Process()
        process.executableURL = TestPaths.ferryBinary
        process.arguments =
            ["schedule", "--on-change", "--debounce", "100ms", "--store", fixture.store.path] + database
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        func waitForVersion(_ version: Int) async throws {
            let deadline = Date().addingTimeInterval(30)
            while (try fixture.storeAccess.manifest(for: "clichange")?.version ?? 0) < version && Date() < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(try fixture.storeAccess.manifest(for: "clichange")?.version == version)
        }
        try await waitForVersion(1)
        // The LISTEN is in place once its connection shows in pg_stat_activity; then a commit publishes
        let deadline = Date().addingTimeInterval(30)
        while try fixture.database.connect().query(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ferry-listen' AND datname = current_database()"
        ).first?.first != "1",
            Date() < deadline
        {
            try await Task.sleep(for: .milliseconds(20))
        }
        try fixture.execute("INSERT INTO t VALUES (3, 'on change')")
        try await waitForVersion(2)
        kill(process.processIdentifier, SIGTERM)
        await process.waitForExit()
        #expect(process.terminationReason == .exit && process.terminationStatus == 0)

        let remove = try await runFerry(["triggers", "remove"] + database)
        #expect(
            remove.status == 0 && remove.stdout.contains("removed trigger ferry_notify_clichange from 1 table"),
            "\(remove.stdout)\(remove.stderr)")
        #expect(
            try fixture.database.connect().query(
                "SELECT count(*) FROM pg_trigger WHERE tgname = 'ferry_notify_clichange'"
            ).first?.first == "0")
    }

    @Test("kill -9 midway through a publish leaves the previous version intact; the next run cleans up and succeeds")
    func crashSafety() async throws {
        // Given version 1 of a small table
        let fixture = try PublisherFixture(
            "crash",
            sql: "CREATE TABLE big (id integer PRIMARY KEY, pad text NOT NULL); INSERT INTO big VALUES (1, 'one');")
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate("dataset: crash\ntables: [{name: big}]\n")
        let v1 = try await fixture.publishOffPool(template: template)
        let store = fixture.storeAccess
        // And a table large enough that the next publish takes a while
        try await offCooperativePool {
            try fixture.execute("INSERT INTO big SELECT g, repeat(md5(g::text), 6) FROM generate_series(2, 600000) g")
        }

        // When a real `ferry publish` is killed with SIGKILL after it started writing the snapshot
        let tmp = store.temporaryDirectory(dataset: "crash")
        try await Self.publishKilledMidway(template: template, fixture: fixture, tmp: tmp)

        // Then the store still serves version 1, intact, and the half-written file is only in tmp/
        let manifest = try #require(try store.manifest(for: "crash"))
        #expect(manifest.version == 1 && manifest.sha256 == v1.sha256 && manifest.versions == [1])
        #expect(try FileDigest.sha256Hex(of: store.snapshotURL(dataset: "crash", version: 1)) == v1.sha256)
        try SQLiteConnection(path: store.snapshotURL(dataset: "crash", version: 1).path, mode: .readOnly)
            .checkIntegrity()
        #expect(!((try? FileManager.default.contentsOfDirectory(atPath: tmp.path)) ?? []).isEmpty)

        // And the next run removes the leftovers and publishes version 2
        let next = try await fixture.publishOffPool(template: template)
        #expect(next.version == 2 && next.tables == ["big": 600_000])
        #expect(try FileManager.default.contentsOfDirectory(atPath: tmp.path).isEmpty)
        let stored = try store.requireManifest("crash")
        #expect(stored.scopes[0].retained.map(\.sha256) == [v1.sha256!, next.sha256!])
        #expect(try store.objectFileNames(dataset: "crash") == stored.expectedObjectFileNames)
    }

    @Test(
        "kill -9 midway through a scoped publish leaves every scope's previous snapshot intact; the next run cleans up")
    func scopedCrashSafety() async throws {
        let fixture = try PublisherFixture(
            "crash-scoped",
            sql:
                "CREATE TABLE big (id integer PRIMARY KEY, pad text NOT NULL); INSERT INTO big VALUES (1, 'one'), (2, 'two');"
        )
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(
            """
            dataset: crash-scoped
            scope: {values: [1, 2, 3], token: "SELECT 1 WHERE $1::text IS NULL"}
            tables:
              - name: big
                filter: "id % 3 < :scope"
            """)
        _ = try await fixture.publishOffPool(template: template)
        let store = fixture.storeAccess
        let before = try store.requireManifest("crash-scoped")
        try await offCooperativePool {
            try fixture.execute("INSERT INTO big SELECT g, repeat(md5(g::text), 6) FROM generate_series(3, 600000) g")
        }

        // When a real `ferry publish` is killed with SIGKILL while it writes the scopes' snapshots
        let tmp = store.temporaryDirectory(dataset: "crash-scoped")
        try await Self.publishKilledMidway(template: template, fixture: fixture, tmp: tmp)

        // Then the manifest and every file it names are exactly as before
        let after = try store.requireManifest("crash-scoped")
        #expect(after == before)
        for entry in after.scopes {
            #expect(
                try FileDigest.sha256Hex(of: try store.fileURL(dataset: "crash-scoped", sha256: entry.sha256))
                    == entry.sha256)
        }
        // And the next run removes the leftovers and gives every scope version 2
        let next = try await fixture.publishOffPool(template: template)
        #expect(next.version == 2 && next.scopes?.allSatisfy { $0.version == 2 } == true)
        #expect(try FileManager.default.contentsOfDirectory(atPath: tmp.path).isEmpty)
        let final = try store.requireManifest("crash-scoped")
        #expect(try store.objectFileNames(dataset: "crash-scoped") == final.expectedObjectFileNames)
    }

    /// Runs a real `ferry publish` (off the cooperative pool) and kills it with SIGKILL once a file in `tmp` has
    /// 2 MB, checking that it was still running then (so the kill really was midway).
    static func publishKilledMidway(template: String, fixture: PublisherFixture, tmp: URL) async throws {
        let arguments = [
            "publish", "--config", template, "--store", fixture.store.path, "--database-url", fixture.database.url,
        ]
        let (wasRunning, reason) = try await offCooperativePool { () throws -> (Bool, Process.TerminationReason) in
            let process = Process()
            process.executableURL = TestPaths.ferryBinary
            process.arguments = arguments
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            let deadline = Date().addingTimeInterval(60)
            var writtenBytes = 0
            while process.isRunning && Date() < deadline && writtenBytes < 2_000_000 {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: tmp.path)) ?? []
                writtenBytes =
                    names.compactMap {
                        (try? FileManager.default.attributesOfItem(atPath: tmp.appendingPathComponent($0).path)[.size])
                            as? Int
                    }.max() ?? 0
                usleep(2_000)
            }
            let running = process.isRunning
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return (running, process.terminationReason)
        }
        #expect(wasRunning, "the publish finished before it could be killed; make the table larger")
        #expect(reason == .uncaughtSignal)
    }
}
