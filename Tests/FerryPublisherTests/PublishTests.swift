import FerryCore
import FerryStore
import Foundation
import Logging
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

@Suite("Publisher publish job")
struct PublishTests {
    static let trips = """
        CREATE TABLE trips (id text PRIMARY KEY, name text NOT NULL, passengers integer, bags integer,
          "createdAt" timestamptz NOT NULL, "updatedAt" timestamptz NOT NULL);
        INSERT INTO trips VALUES ('a', 'Växjö-Kalmar', 0, 0, '2018-04-29 11:21:01+00', '2018-04-29 11:21:02+00'),
                                 ('b', 'Kalmar-Öland', 2, 1, '2018-04-29 11:30:00+00', '2018-04-29 11:45:05+00');
        """
    static let tripsTemplate = """
        dataset: trips
        timestamps: {created: createdAt, updated: updatedAt}
        tables:
          - name: trips
            writable: true
            merge: client-wins
        """

    @Test("a publish makes version 1 with checksum, gzip copy, manifest and metadata")
    func firstPublish() throws {
        let fixture = try PublisherFixture("first", sql: Self.trips)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(Self.tripsTemplate)

        let result = try fixture.publish(template: template)

        #expect(result.dataset == "trips" && result.version == 1 && !result.unchanged)
        #expect(result.tables == ["trips": 2] && result.versions == [1])
        let store = fixture.storeAccess
        let manifest = try #require(try store.manifest(for: "trips"))
        #expect(
            manifest.sha256 == result.sha256 && manifest.size == result.size && manifest.gzipSize == result.gzipSize)
        #expect(try FileDigest.sha256Hex(of: store.snapshotURL(dataset: "trips", version: 1)) == manifest.sha256)
        let unzipped = fixture.directory.appending("unzipped.sqlite")
        try Gzip.decompressFile(from: store.gzipURL(dataset: "trips", version: 1), to: unzipped)
        #expect(try FileDigest.sha256Hex(of: unzipped) == manifest.sha256)

        let db = try fixture.open(dataset: "trips", version: 1)
        try db.checkIntegrity()
        let metadata = try SnapshotMetadata.read(from: db)
        #expect(
            metadata.dataset == "trips" && metadata.version == 1 && metadata.schemaVersion == 1
                && metadata.createdAt == manifest.createdAt)
        #expect(
            metadata.tables == [
                .init(
                    name: "trips", primaryKey: ["id"],
                    columns: ["id", "name", "passengers", "bags", "createdAt", "updatedAt"], writable: true,
                    merge: .clientWins, createdColumn: "createdAt", updatedColumn: "updatedAt", rows: 2)
            ])
        #expect(
            try db.query("SELECT name, \"updatedAt\" FROM trips ORDER BY id") == [
                ["Växjö-Kalmar", "2018-04-29T11:21:02.000Z"], ["Kalmar-Öland", "2018-04-29T11:45:05.000Z"],
            ])
        #expect(try db.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'") == .integer(1))
    }

    @Test("equal data gives no new version; changed data gives the next one; equal data gives equal table bytes")
    func unchanged() throws {
        let fixture = try PublisherFixture("unchanged", sql: Self.trips)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(Self.tripsTemplate)
        let first = try fixture.publish(template: template)

        // When nothing changed
        let second = try fixture.publish(template: template)
        #expect(second.unchanged && second.version == 1 && second.sha256 == first.sha256)
        #expect(
            try fixture.storeAccess.objectFileNames(dataset: "trips") == [
                "\(first.sha256!).rows", "\(first.sha256!).sqlite", "\(first.sha256!).sqlite.gz",
            ])
        #expect(
            try FileManager.default.contentsOfDirectory(
                atPath: fixture.storeAccess.temporaryDirectory(dataset: "trips").path
            ).isEmpty)

        // When one value changes
        try fixture.execute("UPDATE trips SET bags = 3 WHERE id = 'a'")
        let third = try fixture.publish(template: template)
        #expect(!third.unchanged && third.version == 2 && third.versions == [1, 2])
        #expect(
            try fixture.open(dataset: "trips", version: 2).scalar("SELECT bags FROM trips WHERE id = 'a'")
                == .integer(3))

        // And back: the data equals version 1's, but version 2 is the latest, so it is a new version 3.
        try fixture.execute("UPDATE trips SET bags = 0 WHERE id = 'a'")
        let fourth = try fixture.publish(template: template)
        #expect(fourth.version == 3)
        let v1 = try fixture.open(dataset: "trips", version: 1).query("SELECT * FROM trips ORDER BY rowid")
        let v3 = try fixture.open(dataset: "trips", version: 3).query("SELECT * FROM trips ORDER BY rowid")
        #expect(v1 == v3)
    }

    @Test("versions beyond keep are pruned after the new manifest is in place")
    func retention() throws {
        let fixture = try PublisherFixture("keep", sql: Self.trips)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(Self.tripsTemplate)
        for bags in 1...4 {
            try fixture.execute("UPDATE trips SET bags = \(bags) WHERE id = 'b'")
            // Every version a checkpoint and no history: --keep counts versions (docs/delta.md)
            _ = try fixture.publish(template: template, keep: 2, checkpointAt: 0, history: false)
        }
        let manifest = try #require(try fixture.storeAccess.manifest(for: "trips"))
        #expect(manifest.version == 4 && manifest.versions == [3, 4])
        let stored = try fixture.storeAccess.requireManifest("trips")
        #expect(try fixture.storeAccess.objectFileNames(dataset: "trips") == stored.expectedObjectFileNames)
        // versions 3 and 4 with gzip copies; 3's patch from 2, 4's from 3; 4's row index
        #expect(stored.expectedObjectFileNames.count == 2 * 2 + 2 + 1)
        #expect(ferryError { _ = try fixture.publish(template: template, keep: 0) }?.code == .badInput)
    }

    @Test("all tables come from one REPEATABLE READ snapshot: a commit between two tables' COPYs is not seen")
    func consistentCut() throws {
        // Given orders and their lines, and a writer that commits a new order + line while the first table is done
        let fixture = try PublisherFixture(
            "consistent",
            sql: """
                CREATE TABLE orders (id integer PRIMARY KEY, total integer NOT NULL);
                CREATE TABLE lines (id integer PRIMARY KEY, order_id integer NOT NULL, amount integer NOT NULL);
                INSERT INTO orders SELECT g, 10 FROM generate_series(1, 1000) g;
                INSERT INTO lines SELECT g, g, 10 FROM generate_series(1, 1000) g;
                """)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate("dataset: shop\ntables: [{name: orders}, {name: lines}]\n")
        var publisher = fixture.publisher(template: template)
        let writerURL = fixture.database.url
        publisher.afterTable = { table in
            guard table == "orders" else { return }
            let writer = try PostgresConnection(url: writerURL)
            try writer.execute(
                "BEGIN; INSERT INTO orders VALUES (1001, 10); INSERT INTO lines VALUES (1001, 1001, 10); COMMIT;")
        }

        // When it is published
        let result = try publisher.publishBlocking()

        // Then the snapshot holds neither half of the concurrent transaction
        #expect(result.tables == ["orders": 1000, "lines": 1000])
        let db = try fixture.open(dataset: "shop", version: 1)
        #expect(
            try db.scalar("SELECT count(*) FROM lines WHERE order_id NOT IN (SELECT id FROM orders)") == .integer(0))
        // And the next publish sees both halves.
        let next = try fixture.publish(template: template)
        #expect(next.tables == ["orders": 1001, "lines": 1001])
    }

    @Test("a concurrent writer during a publish never shows half a transaction")
    func concurrentWriter() async throws {
        let fixture = try PublisherFixture(
            "concurrent",
            sql: """
                CREATE TABLE a (id integer PRIMARY KEY, pad text); CREATE TABLE b (id integer PRIMARY KEY, pad text);
                INSERT INTO a SELECT g, repeat('x', 100) FROM generate_series(1, 50000) g;
                INSERT INTO b SELECT g, repeat('x', 100) FROM generate_series(1, 50000) g;
                """)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate("dataset: ab\ntables: [{name: a}, {name: b}]\n")
        let url = fixture.database.url
        let writer = Task.detached {
            let pg = try PostgresConnection(url: url)
            var id = 50_001
            while !Task.isCancelled {
                try pg.execute("BEGIN; INSERT INTO a VALUES (\(id), 'w'); INSERT INTO b VALUES (\(id), 'w'); COMMIT;")
                id += 1
            }
            return id
        }
        for _ in 0..<3 {
            let result = try await fixture.publisher(template: template).publish()
            #expect(result.tables?["a"] == result.tables?["b"] && result.tables?["a"] != nil)
        }
        writer.cancel()
        let written = try await writer.value
        #expect(written > 50_001)
    }

    @Test("a second publisher on the same dataset fails clearly, or waits when asked to")
    func lock() async throws {
        let fixture = try PublisherFixture("lock", sql: Self.trips)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(Self.tripsTemplate)
        let held = try fixture.storeAccess.lock(dataset: "trips", wait: false)

        let error = try #require(ferryError { _ = try fixture.publish(template: template) })
        #expect(error.code == .store)
        #expect(error.description.contains("being published by another ferry process"))
        #expect(try fixture.storeAccess.manifest(for: "trips") == nil)

        // With waitForLock the publish waits while the lock is held, and proceeds once the holder lets go.
        let (waits, waitContinuation) = AsyncStream<Void>.makeStream()
        var waitingPublisher = fixture.publisher(template: template, waitForLock: true)
        waitingPublisher.waitingForLock = { waitContinuation.yield() }
        let waiting = Task { [waitingPublisher] in try await waitingPublisher.publish() }
        var events = waits.makeAsyncIterator()
        _ = await events.next()  // the publisher found the lock held and waits for it
        held.unlock()
        let result = try await waiting.value
        #expect(result.version == 1)
    }

    @Test("unreachable PostgreSQL, unknown role with a password, bad URL: clear errors that never show the password")
    func badDatabaseURL() throws {
        let fixture = try PublisherFixture("badurl", sql: Self.trips)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(Self.tripsTemplate)
        var cluster = try #require(URLComponents(string: fixture.database.url))
        cluster.user = "intruder"
        cluster.password = "s3cr3t-Pa55"
        let urls = [
            "postgres://ferry:s3cr3t-Pa55@127.0.0.1:1/app",  // nothing listens
            cluster.string!,  // the cluster refuses the role
            "postgres://ferry:s3cr3t-Pa55@127.0.0.1:1/app?sslmode=bogus",  // libpq rejects an option
            "host=127.0.0.1 port=1 user=ferry password=s3cr3t-Pa55 dbname=app",  // key=value form
            "postgres://ferry:s3cr3t-Pa55 x@127.0.0.1:1/app",  // not a valid URL at all
            "postgres://ferry:s3cr3t%2DPa55@127.0.0.1:1/app?port=notaport",  // percent-encoded, bad option
        ]
        for url in urls {
            let error = try #require(
                ferryError { _ = try fixture.publisher(template: template, url: url).publishBlocking() })
            #expect(error.code == .database, "\(error)")
            #expect(!error.description.contains("s3cr3t-Pa55"), "\(error.description)")
            #expect(!"\(error)".contains("s3cr3t-Pa55"))
        }
        #expect(try fixture.storeAccess.manifest(for: "trips") == nil)
    }

    @Test("every form of the password is scrubbed from libpq messages")
    func scrubbing() {
        let cases = [
            ("postgres://u:p%40ss@h/db", "p@ss"), ("postgres://u:p@ss@h/db", "p@ss"),
            ("host=h password=hunter2 user=u", "hunter2"),
            ("postgres://u@h/db?password=hunter2&sslmode=disable", "hunter2"),
            ("postgres://u:two words@h/db", "two words"),
        ]
        for (url, secret) in cases {
            let scrubbed = PostgresConnection.scrub("failed for \(secret) in \(url)", url: url)
            #expect(!scrubbed.contains(secret), "\(scrubbed)")
        }
    }

    @Test("a query that fails midway leaves the previous version intact and no temp file")
    func failureKeepsPrevious() throws {
        let fixture = try PublisherFixture(
            "midway",
            sql: Self.trips
                + "CREATE TABLE nums (id integer PRIMARY KEY, d integer); INSERT INTO nums SELECT g, g FROM generate_series(0, 100) g;"
        )
        defer { fixture.cleanUp() }
        let good = try fixture.writeTemplate(
            "dataset: trips\ntimestamps: {created: createdAt, updated: updatedAt}\ntables: [{name: trips}]\n")
        _ = try fixture.publish(template: good)
        // A division by zero on the row with d = 0 fails the COPY after it started streaming.
        let failing = try fixture.writeTemplate(
            "dataset: trips\ntimestamps: {created: createdAt, updated: updatedAt}\ntables:\n  - name: trips\n  - name: nums\n    primaryKey: [id]\n    query: SELECT id, 100 / d AS q FROM nums\n",
            name: "failing.yml")
        let error = try #require(ferryError { _ = try fixture.publish(template: failing) })
        #expect(
            error.code == .database && error.description.contains("division by zero")
                && error.description.contains("nums"))
        let manifest = try #require(try fixture.storeAccess.manifest(for: "trips"))
        #expect(manifest.version == 1)
        #expect(
            try FileDigest.sha256Hex(of: fixture.storeAccess.snapshotURL(dataset: "trips", version: 1))
                == manifest.sha256)
        #expect(
            try FileManager.default.contentsOfDirectory(
                atPath: fixture.storeAccess.temporaryDirectory(dataset: "trips").path
            ).isEmpty)
    }
}
