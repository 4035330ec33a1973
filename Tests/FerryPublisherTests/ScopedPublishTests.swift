import FerryCore
import FerryStore
import Foundation
import Logging
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

@Suite("Publisher: one snapshot per scope (access rights)")
struct ScopedPublishTests {
    static var sampleSQL: String {
        get throws {
            try String(
                contentsOf: TestPaths.packageRoot.appendingPathComponent("templates/campgrounds.pg.sql"),
                encoding: .utf8)
        }
    }
    static var tieredTemplate: String {
        TestPaths.packageRoot.appendingPathComponent("templates/campgrounds-tiered.yml").path
    }

    static func ids(_ db: SQLiteConnection, _ table: String) throws -> [String] {
        try db.query("SELECT CAST(id AS TEXT) FROM \(table) ORDER BY 1").map { $0[0].text ?? "" }
    }

    static func open(_ fixture: PublisherFixture, _ entry: ScopeEntry) throws -> SQLiteConnection {
        try SQLiteConnection(
            path: try fixture.storeAccess.fileURL(dataset: "campgrounds-tiered", sha256: entry.sha256).path,
            mode: .readOnly)
    }

    static func scoped(_ fixture: PublisherFixture, _ dataset: String = "campgrounds-tiered") throws -> StoredManifest {
        let manifest = try fixture.storeAccess.requireManifest(dataset)
        guard manifest.scoped else { throw FerryError(.store, "no scoped manifest") }
        return manifest
    }

    @Test(
        "free-tier and premium scopes get different snapshots; children follow their parent; scopes share a version number"
    )
    func tiers() throws {
        let fixture = try PublisherFixture("scopes-tiers", sql: try Self.sampleSQL)
        defer { fixture.cleanUp() }

        let result = try fixture.publish(template: Self.tieredTemplate)
        #expect(!result.unchanged && result.version == 1 && result.sha256 == nil)
        #expect(result.scopes?.map(\.scope) == ["0", "2"])
        #expect(result.scopes?.allSatisfy { $0.version == 1 && !$0.unchanged && !$0.shared } == true)

        let manifest = try Self.scoped(fixture)
        #expect(manifest.lastVersion == 1 && manifest.scopes.map(\.scope) == ["0", "2"])
        let free = try #require(manifest.entry(for: "0"))
        let premium = try #require(manifest.entry(for: "2"))
        #expect(free.sha256 != premium.sha256)
        #expect(
            try FileDigest.sha256Hex(
                of: try fixture.storeAccess.fileURL(dataset: "campgrounds-tiered", sha256: free.sha256)) == free.sha256)

        // Alice's tier 0: the free campgrounds (01, 03, 05), only their reviews and photos.
        let aliceDB = try Self.open(fixture, free)
        #expect(try Self.ids(aliceDB, "campgrounds").map { $0.suffix(2) } == ["01", "03", "05"])
        #expect(try Self.ids(aliceDB, "reviews") == ["1", "2", "4", "6"])
        #expect(try Self.ids(aliceDB, "photos") == ["5f0e1d2c-3b4a-4958-8776-655443322101"])
        #expect(free.current.tables == ["campgrounds": 3, "reviews": 4, "photos": 1])
        #expect(try SnapshotMetadata.read(from: aliceDB).version == 1)
        // Bob's tier 2: everything.
        let bobDB = try Self.open(fixture, premium)
        #expect(
            try Self.ids(bobDB, "campgrounds").count == 5 && Self.ids(bobDB, "reviews").count == 6
                && Self.ids(bobDB, "photos").count == 3)
        #expect(
            try bobDB.query("SELECT count(*) FROM pragma_table_info('campgrounds') WHERE name = 'internal_notes'") == [
                [0]
            ])

        // Nothing changed: no new version and no new file.
        let objects = try FileManager.default.contentsOfDirectory(
            atPath: fixture.storeAccess.objectsDirectory(dataset: "campgrounds-tiered").path
        ).sorted()
        let again = try fixture.publish(template: Self.tieredTemplate)
        #expect(again.unchanged && again.scopes?.allSatisfy(\.unchanged) == true)
        #expect(
            try FileManager.default.contentsOfDirectory(
                atPath: fixture.storeAccess.objectsDirectory(dataset: "campgrounds-tiered").path
            ).sorted() == objects)
        #expect(try Self.scoped(fixture) == manifest)

        // A premium campground changes: only the premium scope gets version 2; the free scope keeps version 1.
        try fixture.execute("UPDATE campgrounds SET name = 'AAA Deluxe II' WHERE tier = 1")
        let third = try fixture.publish(template: Self.tieredTemplate)
        #expect(!third.unchanged && third.version == 2)
        let after = try Self.scoped(fixture)
        #expect(after.entry(for: "0")?.version == 1 && after.entry(for: "0")?.retained.map(\.version) == [1])
        #expect(after.entry(for: "2")?.version == 2 && after.entry(for: "2")?.retained.map(\.version) == [1, 2])
        #expect(
            third.scopes?.first { $0.scope == "0" }?.unchanged == true
                && third.scopes?.first { $0.scope == "2" }?.unchanged == false)
    }

    @Test("scopes with identical content share one stored file")
    func sharedFile() throws {
        let fixture = try PublisherFixture("scopes-share", sql: try Self.sampleSQL)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(
            try String(contentsOfFile: Self.tieredTemplate, encoding: .utf8)
                .replacingOccurrences(
                    of: "values: \"SELECT DISTINCT access_tier FROM users\"", with: "values: [0, 2, 3, 9]"))
        let result = try fixture.publish(template: template)
        let manifest = try Self.scoped(fixture)
        #expect(manifest.scopes.map(\.scope) == ["0", "2", "3", "9"])
        // Tiers 2, 3 and 9 all see every campground: one file for the three of them.
        let premium = Set(["2", "3", "9"].compactMap { manifest.entry(for: $0)?.sha256 })
        #expect(premium.count == 1 && manifest.entry(for: "0")?.sha256 != premium.first)
        #expect(result.scopes?.filter(\.shared).map(\.scope) == ["2", "3", "9"])
        let files = try FileManager.default.contentsOfDirectory(
            atPath: fixture.storeAccess.objectsDirectory(dataset: "campgrounds-tiered").path)
        #expect(
            files.filter { $0.hasSuffix(".sqlite") }.count == 2
                && files.filter { $0.hasSuffix(".sqlite.gz") }.count == 2)
    }

    @Test("a scope value nobody has any more stops being served, and its file goes")
    func scopeDisappears() throws {
        let fixture = try PublisherFixture("scopes-gone", sql: try Self.sampleSQL)
        defer { fixture.cleanUp() }
        _ = try fixture.publish(template: Self.tieredTemplate)
        let premium = try #require(try Self.scoped(fixture).entry(for: "2"))

        try fixture.execute("DELETE FROM users WHERE id = 'bob'")
        let result = try fixture.publish(template: Self.tieredTemplate)
        #expect(!result.unchanged && result.scopes?.map(\.scope) == ["0"])
        let manifest = try Self.scoped(fixture)
        #expect(manifest.scopes.map(\.scope) == ["0"] && manifest.lastVersion == 1)
        #expect(
            !FileManager.default.fileExists(
                atPath: fixture.storeAccess.objectURL(dataset: "campgrounds-tiered", sha256: premium.sha256).path))
    }

    @Test("all scopes come from one PostgreSQL snapshot, even exported in parallel")
    func oneSnapshot() throws {
        let fixture = try PublisherFixture("scopes-snapshot", sql: try Self.sampleSQL)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(
            try String(contentsOfFile: Self.tieredTemplate, encoding: .utf8)
                .replacingOccurrences(
                    of: "values: \"SELECT DISTINCT access_tier FROM users\"", with: "values: [0, 1, 2, 3, 4, 5]"))
        let url = fixture.database.url
        let inserted = Locked(0)
        var configuration = Publisher.Configuration(templatePath: template, databaseURL: url, store: fixture.store)
        configuration.parallelism = 3
        var publisher = Publisher(configuration: configuration, logger: Logger(label: "test"))
        // While the exports run, another session commits a new free campground after every table.
        publisher.afterTable = { _ in
            let n = inserted.withLock { value -> Int in
                value += 1
                return value
            }
            try PostgresConnection(url: url).execute(
                "INSERT INTO campgrounds (name, lat, lon, tier) VALUES ('Late \(n)', 0, 0, 0)")
        }
        _ = try publisher.publishBlocking()
        #expect(inserted.withLock { $0 } == 18)
        let manifest = try Self.scoped(fixture)
        for entry in manifest.scopes {
            let db = try Self.open(fixture, entry)
            #expect(
                try db.query("SELECT count(*) FROM campgrounds WHERE name LIKE 'Late %'") == [[0]],
                "scope \(entry.scope)")
        }
        // Tiers 2…5 see the same rows, so they share a file; 0 and 1 differ.
        #expect(Set(manifest.scopes.map(\.sha256)).count == 3)
    }

    @Test("a parent chain: grandchildren follow their grandparent's filter; :scope binds as the values' type")
    func parentChain() throws {
        let fixture = try PublisherFixture(
            "scopes-chain",
            sql: """
                CREATE TABLE tenants (id int PRIMARY KEY, name text);
                CREATE TABLE sites (id int PRIMARY KEY, tenant_id int REFERENCES tenants, label text);
                CREATE TABLE readings (id bigint PRIMARY KEY, site_id int REFERENCES sites, value float8, note text);
                INSERT INTO tenants VALUES (1, 'north'), (2, 'south'), (3, 'east');
                INSERT INTO sites VALUES (10, 1, 'n1'), (11, 1, 'n2'), (20, 2, 's1'), (30, 3, 'e1');
                INSERT INTO readings VALUES (100, 10, 1.5, ':scope'), (101, 11, 2.5, NULL), (200, 20, 3.5, NULL), (300, 30, 4.5, NULL);
                """)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(
            """
            dataset: tenants
            scope:
              values: "SELECT id FROM tenants WHERE id < 3"
              token: "SELECT id FROM tenants WHERE name = $1"
            tables:
              - name: tenants
                filter: "id = :scope"
              - name: sites
                parent: {table: tenants, column: tenant_id}
              - name: readings
                parent: {table: sites, column: site_id}
                filter: "note IS NULL OR note = ':scope'"   # a literal ':scope' is text, not the placeholder
            """)
        let result = try fixture.publish(template: template)
        #expect(result.scopes?.map(\.scope) == ["1", "2"])
        let manifest = try Self.scoped(fixture, "tenants")
        let north = try SQLiteConnection(
            path: try fixture.storeAccess.fileURL(dataset: "tenants", sha256: manifest.entry(for: "1")!.sha256).path,
            mode: .readOnly)
        #expect(try Self.ids(north, "sites") == ["10", "11"] && Self.ids(north, "readings") == ["100", "101"])
        let south = try SQLiteConnection(
            path: try fixture.storeAccess.fileURL(dataset: "tenants", sha256: manifest.entry(for: "2")!.sha256).path,
            mode: .readOnly)
        #expect(
            try Self.ids(south, "tenants") == ["2"] && Self.ids(south, "sites") == ["20"]
                && Self.ids(south, "readings") == ["200"])
    }

    @Test("switching a dataset from public to scoped keeps version numbers increasing and removes the old files")
    func publicToScoped() throws {
        let fixture = try PublisherFixture("scopes-switch", sql: try Self.sampleSQL)
        defer { fixture.cleanUp() }
        let plain = try fixture.writeTemplate(
            try String(contentsOfFile: Self.tieredTemplate, encoding: .utf8)
                .replacingOccurrences(of: "    filter: \"tier <= :scope\"", with: "")
                .components(separatedBy: "\n").filter {
                    !$0.hasPrefix("scope:") && !$0.hasPrefix("  values:") && !$0.hasPrefix("  token:")
                }
                .joined(separator: "\n"), name: "plain.yml")
        let first = try fixture.publish(template: plain)
        #expect(first.version == 1 && first.scopes == nil)
        _ = try fixture.publish(template: Self.tieredTemplate)
        let manifest = try Self.scoped(fixture)
        #expect(manifest.lastVersion == 2 && manifest.scopes.allSatisfy { $0.version == 2 })
        #expect(
            try fixture.storeAccess.objectFileNames(dataset: "campgrounds-tiered").count == 3
                * Set(manifest.scopes.map(\.sha256)).count)  // snapshot, gzip, row index
        #expect(try fixture.storeAccess.manifest(for: "campgrounds-tiered") == nil)
    }
}
