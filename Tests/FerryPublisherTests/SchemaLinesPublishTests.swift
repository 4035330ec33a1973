import FerryCore
import FerryStore
import Foundation
import Logging
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

/// One dataset published in two schema lines (docs/schema-lines.md) from one PostgreSQL snapshot: each line its own
/// store dataset `DATASET.vN`, versions numbered together, a line dropped from the config retired.
@Suite("Schema lines: publishing")
struct SchemaLinesPublishTests {
    static let sql = """
        CREATE TABLE trips (id integer PRIMARY KEY, name text NOT NULL, seats integer NOT NULL,
          rating integer NOT NULL DEFAULT 3, created_at timestamptz NOT NULL DEFAULT now(),
          updated_at timestamptz NOT NULL DEFAULT now());
        CREATE TABLE stops (id integer PRIMARY KEY, trip integer NOT NULL);
        INSERT INTO trips (id, name, seats) SELECT g, 'trip ' || g, g FROM generate_series(1, 50) g;
        INSERT INTO stops SELECT g, g FROM generate_series(1, 10) g;
        """
    /// Line 1, the old app build's: `seats` as text (retyped), no `rating` (added later), and the `stops` table
    /// line 2 dropped.
    static let v1 = """
        dataset: lt
        schemaVersion: 1
        tables:
          - name: trips
            query: SELECT id, name, seats::text AS seats, created_at, updated_at FROM trips
            primaryKey: [id]
          - name: stops
        """
    static let v2 = "dataset: lt\nschemaVersion: 2\ntables: [{name: trips}]\n"

    @Test("both lines from one snapshot, numbered together; an unchanged line keeps its version")
    func publishedTogether() async throws {
        let fixture = try PublisherFixture("lines", sql: Self.sql)
        defer { fixture.cleanUp() }
        let v1 = try fixture.writeTemplate(Self.v1, name: "lt.v1.yml")
        let v2 = try fixture.writeTemplate(Self.v2, name: "lt.v2.yml")
        var publisher = Self.publisher(fixture, [v2, v1])
        // A writer commits while line 1 is exported: line 2, exported after it, must not see the commit.
        let writerURL = fixture.database.url
        let wrote = Locked(false)
        publisher.afterTable = { _ in
            let first = wrote.withLock { done in
                defer { done = true }
                return !done
            }
            guard first else { return }
            try PostgresConnection(url: writerURL).execute("UPDATE trips SET name = 'renamed' WHERE id = 1")
        }

        let first = try publisher.publishBlocking()
        let lines = try #require(first.lines)
        #expect(lines.map(\.dataset) == ["lt.v1", "lt.v2"])
        #expect(lines.map(\.version) == [1, 1] && first.dataset == "lt.v2" && first.schemaVersion == 2)
        #expect(lines.map(\.schemaVersion) == [1, 2])
        #expect(wrote.withLock { $0 } == true)

        // Equal rows have equal values in both lines, and each line has its own columns and tables.
        let old = try fixture.open(dataset: "lt.v1", version: 1)
        let new = try fixture.open(dataset: "lt.v2", version: 1)
        #expect(try old.scalar("SELECT name FROM trips WHERE id = 1") == .text("trip 1"))
        #expect(try new.scalar("SELECT name FROM trips WHERE id = 1") == .text("trip 1"))
        #expect(try old.scalar("SELECT typeof(seats) FROM trips WHERE id = 7") == .text("text"))
        #expect(try new.scalar("SELECT typeof(seats) FROM trips WHERE id = 7") == .text("integer"))
        #expect(try old.scalar("SELECT count(*) FROM pragma_table_info('trips') WHERE name = 'rating'") == .integer(0))
        #expect(try new.scalar("SELECT rating FROM trips WHERE id = 7") == .integer(3))
        #expect(try old.scalar("SELECT count(*) FROM stops") == .integer(10))
        #expect(try new.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'stops'") == .integer(0))
        #expect(try old.scalar("SELECT dataset || ' ' || schemaVersion FROM ferry_snapshot") == .text("lt.v1 1"))
        #expect(try new.scalar("SELECT dataset || ' ' || schemaVersion FROM ferry_snapshot") == .text("lt.v2 2"))

        // The commit lands in both lines' next version, which has the same number in each.
        let second = try publisher.publishBlocking()
        #expect(second.lines?.map(\.version) == [2, 2])
        #expect(
            try fixture.open(dataset: "lt.v1", version: 2).scalar("SELECT name FROM trips WHERE id = 1")
                == .text("renamed"))
        #expect(
            try fixture.open(dataset: "lt.v2", version: 2).scalar("SELECT name FROM trips WHERE id = 1")
                == .text("renamed"))
        // A patch within each line.
        #expect(second.lines?.allSatisfy { $0.manifest?.current.patches?.contains { $0.from == 1 } == true } == true)

        // A column only line 2 has: line 1 is unchanged and keeps version 2, line 2 gets version 3.
        try fixture.execute("UPDATE trips SET rating = 5 WHERE id = 2")
        let third = try publisher.publishBlocking()
        #expect(third.lines?.map(\.version) == [2, 3])
        #expect(third.lines?.map(\.unchanged) == [true, false] && !third.unchanged)
        // Nothing changed: no line makes a version.
        let fourth = try publisher.publishBlocking()
        #expect(fourth.unchanged && fourth.lines?.map(\.version) == [2, 3])

        // Dropping line 1's template retires it; giving it again brings it back, numbered after every line.
        let store = fixture.storeAccess
        let onlyNew = Self.publisher(fixture, [v2])
        let retiring = try onlyNew.publishBlocking()
        #expect(retiring.retiredLines == [1] && retiring.lines?.map(\.dataset) == ["lt.v2"])
        #expect(try store.storedManifest(for: "lt.v1")?.retiredAt != nil)
        #expect(try store.storedManifest(for: "lt.v2")?.retiredAt == nil)
        try fixture.execute("UPDATE trips SET name = 'again' WHERE id = 3")
        let back = try publisher.publishBlocking()
        #expect(back.retiredLines == [] && back.lines?.map(\.version) == [4, 4])
        #expect(try store.storedManifest(for: "lt.v1")?.retiredAt == nil)
    }

    static func publisher(_ fixture: PublisherFixture, _ templates: [String]) -> Publisher {
        var configuration = fixture.publisher(template: templates[0]).configuration
        configuration.templatePaths = templates
        return Publisher(configuration: configuration, logger: Logger(label: "test"))
    }

    @Test("the CLI: repeated --config, --json with each line, and lines of one dataset only")
    func cli() async throws {
        let fixture = try PublisherFixture("linescli", sql: Self.sql)
        defer { fixture.cleanUp() }
        let v1 = try fixture.writeTemplate(Self.v1, name: "lt.v1.yml")
        let v2 = try fixture.writeTemplate(Self.v2, name: "lt.v2.yml")
        let base = ["publish", "--database-url", fixture.database.url, "--store", fixture.store.path]
        let run = try await runFerry(base + ["--config", v1, "--config", v2, "--json"])
        #expect(run.status == 0, "\(run.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
        let lines = try #require(object["lines"] as? [[String: Any]])
        #expect(lines.map { $0["dataset"] as? String } == ["lt.v1", "lt.v2"])
        #expect(object["dataset"] as? String == "lt.v2" && object["version"] as? Int == 1)
        #expect(object["retiredLines"] as? [Int] == [])

        let text = try await runFerry(base + ["--config", v2])
        #expect(text.status == 0, "\(text.stderr)")
        #expect(
            text.stdout.contains("lt.v2: unchanged") && text.stdout.contains("lt: retired line(s) v1"), "\(text.stdout)"
        )

        // Two templates of the same schema version, or of two datasets: refused, naming the files.
        let twin = try fixture.writeTemplate(Self.v2, name: "twin.yml")
        let same = try await runFerry(base + ["--config", v2, "--config", twin])
        #expect(
            same.status != 0 && same.stderr.contains("twin.yml") && same.stderr.contains("schemaVersion 2"),
            "\(same.stderr)")
        let other = try fixture.writeTemplate(
            "dataset: other\nschemaVersion: 3\ntables: [{name: trips}]\n", name: "other.yml")
        let mixed = try await runFerry(base + ["--config", v2, "--config", other])
        #expect(
            mixed.status != 0 && mixed.stderr.contains("other.yml") && mixed.stderr.contains("'other'"),
            "\(mixed.stderr)")
        let none = try await runFerry(base)
        #expect(none.status != 0 && none.stderr.contains("--config"), "\(none.stderr)")
    }
}
