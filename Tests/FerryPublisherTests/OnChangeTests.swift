import FerryCore
import FerryStore
import Foundation
import Logging
import ServiceLifecycle
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

/// Publish on change (docs/freshness.md): real PostgreSQL, the real triggers, LISTEN and publisher.
@Suite("Publish on change", .serialized)
struct OnChangeTests {
    static let sql =
        "CREATE TABLE t (id integer PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a'); CREATE TABLE other (id integer PRIMARY KEY);"
    static let template = "dataset: onchange\ntables: [{name: t}]\n"

    @Test("the coalescer is due debounce after the last notification, at most maxDelay after the first")
    func coalescer() {
        let start = ContinuousClock.now
        var c = ChangeCoalescer(debounce: .milliseconds(500), maxDelay: .seconds(5))
        #expect(c.due == nil && c.take(at: start) == nil)
        c.note(.change, table: "public.t", at: start)
        #expect(c.due == start + .milliseconds(500))
        c.note(.change, table: "public.t", at: start + .milliseconds(300))
        #expect(c.due == start + .milliseconds(800))
        #expect(c.take(at: start + .milliseconds(700)) == nil)
        // A steady stream of notifications is published maxDelay after the first
        for ms in stride(from: 600, through: 6000, by: 300) {
            c.note(.change, table: "public.t", at: start + .milliseconds(ms))
        }
        #expect(c.due == start + .seconds(5))
        #expect(
            c.take(at: start + .seconds(5)).map { [$0.0.rawValue] + ($0.1.map { Array($0) } ?? ["any"]) } == [
                "change", "public.t",
            ])
        #expect(c.due == nil)
        c.note(.reconnect, table: nil, at: start)
        c.note(.change, table: "public.t", at: start)
        #expect(
            c.take(at: start + .seconds(1)).map { [$0.0.rawValue] + ($0.1.map { Array($0) } ?? ["any"]) } == [
                "reconnect", "any",
            ])
    }

    /// Runs an ``OnChangeSchedule`` over `fixture` until `body` returns, collecting each publish's reason and version.
    func withSchedule(
        _ fixture: PublisherFixture, template: String, debounce: Duration = .milliseconds(200),
        maxDelay: Duration = .seconds(2),
        every: Duration? = nil,
        _ body:
            @Sendable (
                _ runs: @Sendable () -> [(OnChangeSchedule.Reason, Int?, Double)],
                _ waitFor: @Sendable (Int) async throws -> Void, _ listening: AsyncStream<Bool>
            ) async throws -> Void
    ) async throws {
        let runs = Locked<[(OnChangeSchedule.Reason, Int?, Double)]>([])
        let (counts, countContinuation) = AsyncStream<Int>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let (listening, listeningContinuation) = AsyncStream<Bool>.makeStream()
        let schedule = OnChangeSchedule(
            publisher: fixture.publisher(template: template), channel: ChangeTriggers.channel(for: "onchange"),
            debounce: debounce, maxDelay: maxDelay,
            every: every, logger: Logger(label: "test"),
            onRun: { reason, outcome in
                let count = runs.withLock { list in
                    list.append((reason, (try? outcome.get()).map(\.version), (try? outcome.get())?.seconds ?? 0))
                    return list.count
                }
                countContinuation.yield(count)
            },
            onListening: { listeningContinuation.yield($0) })
        let group = ServiceGroup(services: [schedule], logger: Logger(label: "test"))
        let waitFor: @Sendable (Int) async throws -> Void = { wanted in
            let deadline = ContinuousClock.now + .seconds(60)
            while runs.withLock({ $0.count }) < wanted {
                guard ContinuousClock.now < deadline else {
                    throw FerryError(
                        .network, "only \(runs.withLock { $0.count }) publishes within 60 s, expected \(wanted)")
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        _ = counts
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await body({ runs.withLock { $0 } }, waitFor, listening)
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }

    @Test(
        "a commit publishes within the debounce plus the publish time, and a burst of 100 commits leads to at most 3 publishes"
    )
    func commitsPublish() async throws {
        let fixture = try PublisherFixture("onchange", sql: Self.sql)
        defer { fixture.cleanUp() }
        let path = try fixture.writeTemplate(Self.template)
        try ChangeTriggers.install(try Template.load(path: path), on: fixture.database.connect())
        try await withSchedule(fixture, template: path) { runs, waitFor, listening in
            // It publishes once at start, and listens
            try await waitFor(1)
            var iterator = listening.makeAsyncIterator()
            #expect(await iterator.next() == false)
            #expect(runs().first?.0 == .start && runs().first?.1 == 1)

            // One commit: one publish, within the debounce plus the publish time
            let committed = ContinuousClock.now
            try fixture.execute("UPDATE t SET v = 'b' WHERE id = 1")
            try await waitFor(2)
            let elapsed = ContinuousClock.now - committed
            #expect(runs()[1].0 == .change && runs()[1].1 == 2)
            // the bound: debounce (200 ms here) + the publish's own time, with a margin for a busy machine
            let publishTime = Duration.seconds(runs()[1].2)
            #expect(
                elapsed < .milliseconds(200) + publishTime + .seconds(3), "\(elapsed), the publish took \(publishTime)")

            // A burst of 100 commits, one connection: at most 3 publishes, and the last holds the last commit
            let pg = try fixture.database.connect()
            for i in 0..<100 { try pg.execute("INSERT INTO t VALUES (\(100 + i), 'burst')") }
            try await waitFor(3)
            // Quiet for well past the debounce: no publish follows
            try await Task.sleep(for: .seconds(1))
            let burst = runs().dropFirst(2)
            #expect(burst.count >= 1 && burst.count <= 3, "\(burst.count) publishes for the burst")
            let db = try fixture.open(dataset: "onchange", version: try #require(burst.last?.1))
            #expect(try db.scalar("SELECT count(*) FROM t")?.integer == 101)
            // A change to a table no trigger covers publishes nothing
            let before = runs().count
            try fixture.execute("INSERT INTO other VALUES (1)")
            try await Task.sleep(for: .seconds(1))
            #expect(runs().count == before)
        }
    }

    @Test("a dropped LISTEN connection is recovered, with one catch-up publish")
    func reconnectCatchesUp() async throws {
        let fixture = try PublisherFixture("onchange-drop", sql: Self.sql)
        defer { fixture.cleanUp() }
        let path = try fixture.writeTemplate(Self.template)
        try ChangeTriggers.install(try Template.load(path: path), on: fixture.database.connect())
        try await withSchedule(fixture, template: path) { runs, waitFor, listening in
            try await waitFor(1)
            var iterator = listening.makeAsyncIterator()
            #expect(await iterator.next() == false)
            // A change while the listener is away: it is not notified, and the catch-up publish carries it
            let pg = try fixture.database.connect()
            let killed = try pg.query(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
                [PostgresListener.applicationName])
            #expect(killed.first?.first == "1")
            #expect(await iterator.next() == true)
            try await waitFor(2)
            #expect(runs()[1].0 == .reconnect)
            try await Task.sleep(for: .seconds(1))
            #expect(runs().count == 2, "one catch-up publish, not more: \(runs().map(\.0))")
            // And it listens again: the next commit publishes
            try fixture.execute("UPDATE t SET v = 'after' WHERE id = 1")
            try await waitFor(3)
            #expect(runs()[2].0 == .change && runs()[2].1 == 2)
        }
    }

    @Test("with --every beside --on-change, the interval publishes when no notification comes")
    func intervalSafetyNet() async throws {
        let fixture = try PublisherFixture("onchange-every", sql: Self.sql)
        defer { fixture.cleanUp() }
        let path = try fixture.writeTemplate(Self.template)
        // No triggers installed: only the interval sees the change
        try await withSchedule(fixture, template: path, every: .milliseconds(600)) { runs, waitFor, _ in
            try await waitFor(1)
            try fixture.execute("UPDATE t SET v = 'unseen' WHERE id = 1")
            try await waitFor(2)
            #expect(runs()[1].0 == .interval && runs()[1].1 == 2)
        }
    }
}

/// A publish on change reads only what may have changed (``Publisher/publish(changedTables:)``).
@Suite("Publish on change reads only what changed")
struct ChangedTablesTests {
    static let sql = """
        CREATE TABLE t (id integer PRIMARY KEY, v text); INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 50) g;
        CREATE TABLE u (id integer PRIMARY KEY, v text); INSERT INTO u SELECT g, 'u' || g FROM generate_series(1, 2000) g;
        CREATE TABLE c (id integer PRIMARY KEY, t_id integer); INSERT INTO c SELECT g, g FROM generate_series(1, 50) g;
        """
    static let template = """
        dataset: partial
        tables:
          - {name: t}
          - {name: u}
          - {name: c, parent: {table: t, column: t_id}}
        """

    @Test(
        "the tables read come from PostgreSQL's plan of each rows query: sources, joins in a query, views, parent links"
    )
    func tablesToRead() throws {
        let fixture = try PublisherFixture(
            "partial-plan",
            sql: Self.sql + """
                CREATE VIEW u_view AS SELECT id, v FROM u;
                """)
        defer { fixture.cleanUp() }
        let template = try Template.load(
            path: try fixture.writeTemplate(
                """
                dataset: plan
                tables:
                  - {name: t}
                  - {name: u}
                  - {name: c, parent: {table: t, column: t_id}}
                  - {name: j, source: c, query: "SELECT c.id, u.v FROM c JOIN u ON u.id = c.id", primaryKey: [id]}
                  - {name: w, source: u_view, primaryKey: [id]}
                """))
        let session = try ExportSession(template: template, databaseURL: fixture.database.url)
        let relations = ChangedTables.relations(of: session.plans, pg: session.pg)
        #expect(relations["t"] == ["public.t"])
        #expect(relations["c"] == ["public.c", "public.t"])
        #expect(relations["j"] == ["public.c", "public.u"])
        #expect(relations["w"] == ["public.u"])
        #expect(ChangedTables.tablesToRead(relations: relations, changed: ["public.u"]) == ["u", "j", "w"])
        #expect(ChangedTables.tablesToRead(relations: relations, changed: ["public.t"]) == ["t", "c"])
        #expect(ChangedTables.tablesToRead(relations: relations, changed: ["t"]) == ["t", "c"])  // no schema: any
        #expect(ChangedTables.tablesToRead(relations: relations, changed: ["other.t"]).isEmpty)
        #expect(ChangedTables.tablesToRead(relations: ["x": []], changed: []) == ["x"])  // unknown: read
        // The session's transaction is still usable after the EXPLAINs
        #expect(try session.pg.query("SELECT count(*) FROM t").first?.first == "50")
    }

    @Test(
        "a change to one table publishes its rows and keeps the others' from the current version; the result equals a full read"
    )
    func keepsUnchangedTables() async throws {
        let fixture = try PublisherFixture("partial", sql: Self.sql)
        defer { fixture.cleanUp() }
        let path = try fixture.writeTemplate(Self.template)
        let publisher = fixture.publisher(template: path)
        #expect(try await publisher.publish().version == 1)

        try fixture.execute("UPDATE u SET v = 'changed' WHERE id = 7")
        let partial = try await publisher.publish(changedTables: ["public.u"])
        #expect(partial.version == 2 && !partial.unchanged)
        #expect(partial.keptTables == ["c", "t"])  // c reads t through its parent link, not u
        #expect(partial.incremental?.updated == 1)
        let db = try fixture.open(dataset: "partial", version: 2)
        #expect(try db.scalar("SELECT v FROM u WHERE id = 7")?.text == "changed")
        #expect(
            try db.scalar("SELECT count(*) FROM t")?.integer == 50 && db.scalar("SELECT count(*) FROM c")?.integer == 50
        )
        // The stored content digest is the rows' own: the same as computing it from the file
        let manifest = try #require(try fixture.storeAccess.manifest(for: "partial"))
        #expect(try ContentDigest.compute(db, tables: ["t", "u", "c"]).description == manifest.contentDigest)

        // Nothing changed since: a publish on change and a full read both keep version 2
        #expect(try await publisher.publish(changedTables: ["public.u"]).unchanged)
        #expect(try await publisher.publish().unchanged)

        // A change to a table the triggers did not name is not read on change; the next full read (the interval's)
        // brings it
        try fixture.execute("UPDATE t SET v = 'unnamed' WHERE id = 1")
        let onChange = try await publisher.publish(changedTables: ["public.u"])
        #expect(onChange.unchanged && onChange.keptTables == ["c", "t"])
        let full = try await publisher.publish()
        #expect(full.version == 3 && full.keptTables.isEmpty)
        #expect(
            try fixture.open(dataset: "partial", version: 3).scalar("SELECT v FROM t WHERE id = 1")?.text == "unnamed")
    }
}

@Suite("A cancelled publish")
struct CancelledPublishTests {
    @Test("cancelling the task stops the publish after the table being read, and the store is as it was")
    func cancelBetweenTables() async throws {
        let fixture = try PublisherFixture("cancel", sql: ChangedTablesTests.sql)
        defer { fixture.cleanUp() }
        let path = try fixture.writeTemplate(ChangedTablesTests.template)
        #expect(try await fixture.publisher(template: path).publish().version == 1)
        let before = try #require(try fixture.storeAccess.manifest(for: "partial"))
        let objects = try FileManager.default.contentsOfDirectory(
            atPath: fixture.store.appendingPathComponent("partial/objects").path
        ).sorted()
        try fixture.execute("UPDATE u SET v = 'changed' WHERE id = 1")

        // The first table's hook waits until the test has cancelled the publish's task
        let reached = DispatchSemaphore(value: 0)
        let proceed = DispatchSemaphore(value: 0)
        var publisher = fixture.publisher(template: path)
        publisher.afterTable = { table in
            if table == "t" {
                reached.signal()
                proceed.wait()
            }
        }
        let job = publisher
        let task = Task { try await job.publish() }
        try await offCooperativePool { reached.wait() }
        task.cancel()
        proceed.signal()
        let result = await task.result
        #expect(throws: CancellationError.self) { try result.get() }

        // The store is as it was: the same manifest, the same objects, nothing left in tmp/
        #expect(try fixture.storeAccess.manifest(for: "partial") == before)
        #expect(
            try FileManager.default.contentsOfDirectory(
                atPath: fixture.store.appendingPathComponent("partial/objects").path
            ).sorted() == objects)
        let tmp = fixture.storeAccess.temporaryDirectory(dataset: "partial")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: tmp.path)) ?? []).isEmpty)
        // And the next publish works
        #expect(try await fixture.publisher(template: path).publish().version == 2)
    }
}
