import FerryCore
import FerryStore
import FerryTestSupport
import Foundation
import Logging
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

/// A version built from the previous one plus the row diff (``IncrementalBuild``) must hold exactly the rows a build
/// from scratch holds, with the same content digest, and a patch that turns the previous version into it.
@Suite("Publisher: versions built from the previous one")
struct IncrementalPublishTests {
    static let schema = """
        CREATE TABLE items (id text PRIMARY KEY, n integer, note text, data jsonb, at timestamptz, blob bytea, u uuid, price numeric(8,2));
        CREATE TABLE pairs (a integer, b text, v double precision, PRIMARY KEY (a, b));
        CREATE TABLE counters (id bigint PRIMARY KEY, c integer NOT NULL);
        INSERT INTO items
          SELECT 'item-' || lpad(g::text, 5, '0'), g % 97, CASE WHEN g % 5 = 0 THEN NULL ELSE 'note ' || g END,
                 jsonb_build_object('g', g, 'tags', jsonb_build_array('a', g % 3)), timestamptz '2024-01-01 00:00:00+00' + g * interval '1 minute',
                 decode(md5(g::text), 'hex'), md5(g::text)::uuid, (g % 1000) / 10.0
          FROM generate_series(1, 3000) g;
        INSERT INTO pairs SELECT g % 50, 'k' || (g / 50), g * 0.5 FROM generate_series(1, 1000) g;
        INSERT INTO counters SELECT g * 10, g FROM generate_series(1, 2000) g;
        """
    static let template = """
        dataset: inc
        tables:
          - name: items
            indexes: ["CREATE INDEX items_n ON items(n)"]
          - name: pairs
          - name: counters
        """
    static let tables = ["items", "pairs", "counters"]

    /// Publishes `template` with the given settings into `store`.
    static func publish(_ fixture: PublisherFixture, _ template: String, store: URL? = nil, incremental: Bool = true)
        throws -> PublishResult
    {
        var configuration = Publisher.Configuration(
            templatePath: template, databaseURL: fixture.database.url, store: store ?? fixture.store)
        configuration.incremental = incremental
        return try Publisher(configuration: configuration, logger: Logger(label: "test")).publishBlocking()
    }

    /// The file the next version of `dataset` is built from, and its row index: a checkpoint's in the store, a
    /// step's in the publisher's work directory (docs/delta.md, "Checkpoints and steps").
    static func base(_ store: FileSnapshotStore, _ dataset: String) throws -> (file: URL, index: URL) {
        let current = try store.requireManifest(dataset).scopes[0].current
        if current.isCheckpoint {
            return (
                store.objectURL(dataset: dataset, sha256: current.sha256),
                store.rowIndexURL(dataset: dataset, sha256: current.sha256)
            )
        }
        // A step version's working copy: the version's own file, built in place, and its row index.
        let work = store.root.appendingPathComponent(".ferry-work/\(dataset)")
        return (
            work.appendingPathComponent("\(current.sha256).sqlite"),
            work.appendingPathComponent("\(current.sha256).sqlite.rows")
        )
    }

    /// Every table's rows in key order, and ferry_tables.
    static func rows(_ url: URL) throws -> [[SQLiteValue]] {
        let db = try SQLiteConnection(path: url.path, mode: .readOnly)
        return try db.query("SELECT * FROM items ORDER BY id") + db.query("SELECT * FROM pairs ORDER BY a, b")
            + db.query("SELECT * FROM counters ORDER BY id")
            + db.query("SELECT name, rows FROM ferry_tables ORDER BY name")
    }

    /// Checks the current version of `fixture.store` against a build from scratch of the same data in a second store:
    /// equal rows, equal content digest (recorded and recomputed), a clean quick_check, and a patch from the previous
    /// version that turns it into this one.
    static func expectEqualToScratch(
        _ fixture: PublisherFixture, _ template: String, label: String, checkPatch: Bool = true,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let store = fixture.storeAccess
        let manifest = try store.requireManifest("inc")
        let current = manifest.scopes[0].current
        let file = try store.fileURL(dataset: "inc", sha256: current.sha256)
        let scratchStore = fixture.directory.appending("scratch-\(label)")
        let scratch = try publish(fixture, template, store: scratchStore, incremental: false)
        let scratchFile = try FileSnapshotStore(root: scratchStore).snapshotURL(
            dataset: "inc", version: scratch.version)
        #expect(try rows(file) == rows(scratchFile), "\(label): rows", sourceLocation: sourceLocation)
        #expect(
            current.published.contentDigest == scratch.manifest?.current.contentDigest, "\(label): content digest",
            sourceLocation: sourceLocation)
        let db = try SQLiteConnection(path: file.path, mode: .readOnly)
        try db.checkIntegrity()
        #expect(
            try ContentDigest.compute(db, tables: tables).description == current.published.contentDigest,
            "\(label): recomputed digest", sourceLocation: sourceLocation)
        if checkPatch, let previous = manifest.scopes[0].retained.dropLast().last,
            let ref = current.published.patch(from: previous.version)
        {
            let copy = fixture.directory.appending("device-\(label).sqlite")
            try? FileManager.default.removeItem(at: copy)  // one copy per label; none may exist yet
            try FileManager.default.copyItem(at: try store.fileURL(dataset: "inc", sha256: previous.sha256), to: copy)
            let device = try SQLiteConnection(path: copy.path)
            let patch = try store.loadPatch(dataset: "inc", ref)
            try device.transaction { try patch.apply(to: device) { _ in .abort } }
            #expect(try rows(copy) == rows(file), "\(label): patched rows", sourceLocation: sourceLocation)
        }
    }

    @Test("updates, inserts, deletes, NULLs and a changed key: the version built from v1 equals a build from scratch")
    func builtFromPrevious() throws {
        let fixture = try PublisherFixture("inc-basic", sql: Self.schema)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(Self.template)
        let v1 = try Self.publish(fixture, template)
        #expect(v1.incremental == nil && v1.version == 1)
        let store = fixture.storeAccess
        #expect(FileManager.default.fileExists(atPath: store.rowIndexURL(dataset: "inc", sha256: v1.sha256!).path))

        // When rows change in every way a row can
        try fixture.execute(
            """
            UPDATE items SET note = 'changed ' || id, n = n + 1 WHERE id IN ('item-00010', 'item-00500', 'item-02999');
            UPDATE items SET note = NULL, data = NULL, blob = NULL WHERE id = 'item-00011';
            UPDATE items SET id = 'item-99999' WHERE id = 'item-00012';
            DELETE FROM items WHERE id IN ('item-00001', 'item-01500', 'item-03000');
            INSERT INTO items (id, n, note) VALUES ('item-00000', 1, 'first'), ('item-01500a', 2, NULL), ('zzz', 3, 'last');
            UPDATE pairs SET v = -1 WHERE a = 7;
            DELETE FROM pairs WHERE a = 8;
            INSERT INTO pairs VALUES (100, 'new', 1.5);
            UPDATE counters SET c = -c WHERE id IN (10, 20000);
            DELETE FROM counters WHERE id = 30;
            INSERT INTO counters VALUES (5, 0), (99999, 1);
            """)
        let v2 = try Self.publish(fixture, template)

        // Then it is built from v1, with exact counts
        let counts = try #require(v2.incremental)
        #expect(counts.updated == 4 + 20 + 2 && counts.inserted == 3 + 1 + 1 + 2 && counts.deleted == 3 + 1 + 20 + 1)
        #expect(counts.unchanged + counts.updated + counts.inserted == v2.tables!.values.reduce(0, +))
        #expect(v2.phases[.indexes] == nil && v2.phases[.contentDigest] == nil)
        // And it equals a build from scratch, and v1's patch leads to it
        try Self.expectEqualToScratch(fixture, template, label: "v2")
        // And only v2 keeps a row index (in the work directory: v2 is stored as a step)
        let files = try store.objectFileNames(dataset: "inc").filter { $0.hasSuffix(".rows") }
        #expect(files.isEmpty)
        #expect(try Self.base(store, "inc").index.lastPathComponent == "\(v2.sha256!).sqlite.rows")
        #expect(FileManager.default.fileExists(atPath: try Self.base(store, "inc").index.path))
        // The work directory holds one whole file, the version's own (built in place from v1's, whose copy it was),
        // beside its row index
        let work = store.root.appendingPathComponent(".ferry-work/inc")
        let names = try FileManager.default.contentsOfDirectory(atPath: work.path).filter { $0 != "tmp" }.sorted()
        #expect(names == ["\(v2.sha256!).sqlite", "\(v2.sha256!).sqlite.rows"])
        #expect(try FileDigest.sha256Hex(of: work.appendingPathComponent("\(v2.sha256!).sqlite")) == v2.sha256)
        #expect(v2.phases[.clone] != nil)  // v1 is a checkpoint: its store object was copied

        // When more rows change (a text key inserted and deleted, an integer key inserted), v3 is built in place of
        // v2's working copy: nothing is copied, and the work directory again holds one whole file, v3's
        try fixture.execute(
            """
            INSERT INTO items (id, n, note) VALUES ('item-00000a', 7, 'new in v3'), ('zzzz', 8, NULL);
            DELETE FROM items WHERE id = 'item-00002';
            UPDATE pairs SET v = v + 1 WHERE a = 3;
            INSERT INTO counters VALUES (100001, 3);
            """)
        let v3 = try Self.publish(fixture, template)
        #expect(v3.version == 3 && v3.incremental?.inserted == 3 && v3.phases[.clone] == nil)
        try Self.expectEqualToScratch(fixture, template, label: "v3")
        let after = try FileManager.default.contentsOfDirectory(atPath: work.path).filter { $0 != "tmp" }.sorted()
        #expect(after == ["\(v3.sha256!).sqlite", "\(v3.sha256!).sqlite.rows"])
        #expect(try FileDigest.sha256Hex(of: work.appendingPathComponent("\(v3.sha256!).sqlite")) == v3.sha256)
        // And v4 builds on v3's row index, whose rowids for the inserted text keys were corrected
        try fixture.execute("UPDATE items SET note = 'changed in v4' WHERE id IN ('item-00000a', 'zzz')")
        let v4 = try Self.publish(fixture, template)
        #expect(v4.version == 4 && v4.incremental?.updated == 2 && v4.phases[.clone] == nil)
        try Self.expectEqualToScratch(fixture, template, label: "v4")
    }

    @Test(
        "100 versions 10 s apart under history tiers: a cold build of the current version from the newest checkpoint is the recorded file, a checkpoint is cut every 128 versions, and a version after a merged step is a catch-up point only"
    )
    func tieredStepsStayBuildable() throws {
        let fixture = try PublisherFixture("inc-tiers", sql: Self.schema)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(Self.template)
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        var configuration = Publisher.Configuration(
            templatePath: template, databaseURL: fixture.database.url, store: fixture.store)
        configuration.patchHorizon = .seconds(30 * 86_400)
        for version in 1...140 {
            if version > 1 {
                try fixture.execute("UPDATE items SET n = n + 1 WHERE id = 'item-\(String(format: "%05d", version))'")
            }
            let now = start.addingTimeInterval(Double(version) * 10)
            configuration.clock = { now }
            _ = try Publisher(configuration: configuration, logger: Logger(label: "test")).publishBlocking()
            guard version == 100 || version == 140 else { continue }
            // Then a server with an empty cache builds it from the newest checkpoint by the steps as published: the
            // tiers thinned versions before that checkpoint only (a merged step would build other bytes)
            let store = fixture.storeAccess
            let manifest = try store.requireManifest("inc")
            let entry = manifest.scopes[0]
            #expect(entry.current.version == version && !entry.current.isCheckpoint)
            let cache = fixture.directory.appending("cold-cache-\(version)")
            let built = try VersionBuilder(store: store, cache: cache).file(
                of: entry.current, in: entry, manifest: manifest)
            #expect(try FileDigest.sha256Hex(of: built) == entry.current.sha256)
            let checkpoints = entry.chain.filter(\.isCheckpoint).map(\.version)
            if version == 100 {
                // Nothing after the only checkpoint is thinned yet, and only the current version keeps its patches
                // (each older one's checkpoint patch would stay in the store, each larger than the one before)
                #expect(checkpoints == [1] && entry.chain.count == 100, "\(checkpoints), \(entry.chain.count) points")
                #expect(entry.chain.dropLast().allSatisfy { $0.published.patches == nil })
                let patches = try store.objectFileNames(dataset: "inc").filter { $0.hasSuffix(".patch.gz") }
                #expect(patches.count <= 99 + 1, "\(patches.count) patch objects: 99 steps and the checkpoint patch")
            } else {
                // A checkpoint was cut at most 128 versions after the first, and the versions before it are thinned
                let newest = try #require(checkpoints.last)
                #expect(newest > 1 && newest <= 130, "checkpoints \(checkpoints)")
                #expect(entry.chain.count < version - 20, "\(entry.chain.count) points")
                #expect(entry.chain.filter { $0.version >= newest }.count == version - newest + 1)
                // The versions after a merged step and before the newest checkpoint are catch-up points only: a
                // whole file of one is refused by name (it would not be the recorded bytes); none from the newest
                // checkpoint on is
                let pointsOnly = entry.chain.filter { $0.catchUpOnly == true }
                #expect(!pointsOnly.isEmpty && pointsOnly.allSatisfy { $0.version < newest && !$0.isCheckpoint })
                #expect(!entry.chain.contains { $0.catchUpOnly == nil && !$0.isCheckpoint && $0.version < newest })
                let old = try #require(entry.retained.last { $0.catchUpOnly == true })
                #expect {
                    try VersionBuilder(store: store, cache: cache).file(of: old, in: entry, manifest: manifest)
                } throws: { ($0 as? FerryError)?.code == .notFound && "\($0)".contains("catch up from") }
            }
        }
    }

    @Test("an unchanged publish writes no SQLite file: it only reads PostgreSQL's rows past the row index")
    func unchangedWritesNothing() throws {
        let fixture = try PublisherFixture("inc-same", sql: Self.schema)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(Self.template)
        let v1 = try Self.publish(fixture, template)
        let before = try fixture.storeAccess.objectFileNames(dataset: "inc")

        let again = try Self.publish(fixture, template)

        #expect(again.unchanged && again.version == 1 && again.sha256 == v1.sha256)
        #expect(again.incremental?.unchanged == v1.tables!.values.reduce(0, +) && again.incremental?.changed == 0)
        #expect(again.phases[.clone] == nil && again.phases[.store] == nil && again.phases[.quickCheck] == nil)
        #expect(try fixture.storeAccess.objectFileNames(dataset: "inc") == before)
        #expect(
            try FileManager.default.contentsOfDirectory(
                atPath: fixture.storeAccess.temporaryDirectory(dataset: "inc").path
            ).isEmpty)
    }

    @Test("a corrupt, truncated or outdated row index, a missing one, or --full: the file is built from scratch")
    func unusableIndexBuildsFromScratch() throws {
        let fixture = try PublisherFixture("inc-corrupt", sql: Self.schema)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(Self.template)
        _ = try Self.publish(fixture, template)
        let store = fixture.storeAccess
        func currentIndex() throws -> URL { try Self.base(store, "inc").index }
        let damages: [(String, (URL) throws -> Void)] = [
            (
                "a flipped byte",
                { url in
                    let handle = try FileHandle(forUpdating: url)
                    try handle.seek(toOffset: 100)
                    let byte = try #require(try handle.read(upToCount: 1)).first!
                    try handle.seek(toOffset: 100)
                    try handle.write(contentsOf: [byte ^ 0x01])
                    try handle.close()
                }
            ),
            (
                "a truncated file",
                { url in
                    let handle = try FileHandle(forUpdating: url)
                    try handle.truncate(atOffset: 1000)
                    try handle.close()
                }
            ),
            ("no file", { url in try FileManager.default.removeItem(at: url) }),
        ]
        for (round, (label, damage)) in damages.enumerated() {
            try damage(try currentIndex())
            try fixture.execute("UPDATE items SET n = \(1000 + round) WHERE id = 'item-00002'")
            let result = try Self.publish(fixture, template)
            #expect(result.incremental == nil && result.phases[.indexes] != nil, "\(label)")
            try Self.expectEqualToScratch(fixture, template, label: "damage-\(round)")
            #expect(FileManager.default.fileExists(atPath: try currentIndex().path), "\(label): a fresh index")
        }

        // When the current version's file does not match its index (a table gone: SQLite refuses the copy's
        // statements), the file is built from scratch too
        let object = try Self.base(store, "inc").file
        let damaged = try SQLiteConnection(path: object.path)
        try damaged.execute("DROP TABLE pairs")
        try fixture.execute("UPDATE pairs SET v = 0 WHERE a = 1")
        let rebuilt = try Self.publish(fixture, template)
        #expect(rebuilt.incremental == nil && rebuilt.phases[.indexes] != nil)
        try Self.expectEqualToScratch(fixture, template, label: "damaged-object", checkPatch: false)

        // When the template changes (an index added), the file is built from scratch too
        let changed = try fixture.writeTemplate(
            Self.template.replacingOccurrences(
                of: "  - name: pairs", with: "  - name: pairs\n    indexes: [\"CREATE INDEX pairs_v ON pairs(v)\"]"),
            name: "indexed.yml")
        try fixture.execute("UPDATE items SET n = 7 WHERE id = 'item-00003'")
        let reindexed = try Self.publish(fixture, changed)
        #expect(reindexed.incremental == nil)
        let db = try SQLiteConnection(
            path: try store.fileURL(dataset: "inc", sha256: reindexed.sha256!).path, mode: .readOnly)
        #expect(try db.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'pairs_v'") == .integer(1))

        // And --full builds from scratch although the index is good
        try fixture.execute("UPDATE items SET n = 8 WHERE id = 'item-00003'")
        #expect(try Self.publish(fixture, changed, incremental: false).incremental == nil)
        try fixture.execute("UPDATE items SET n = 9 WHERE id = 'item-00003'")
        #expect(try Self.publish(fixture, changed).incremental?.updated == 1)
    }

    @Test(
        "a change the copy cannot take in stream order (rows swapping a UNIQUE value) falls back to a build from scratch"
    )
    func uniqueSwapFallsBack() throws {
        let fixture = try PublisherFixture("inc-unique", sql: Self.schema)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(
            Self.template.replacingOccurrences(
                of: "  - name: counters",
                with: "  - name: counters\n    indexes: [\"CREATE UNIQUE INDEX counters_c ON counters(c)\"]"))
        _ = try Self.publish(fixture, template)

        // When two rows swap their unique values
        try fixture.execute("UPDATE counters SET c = CASE id WHEN 10 THEN 2 ELSE 1 END WHERE id IN (10, 20)")
        let result = try Self.publish(fixture, template)

        // Then the version is built from scratch, correct. (Its patch cannot be applied in order either, as for any
        // swap of UNIQUE values: a device gets a constraint conflict and takes the full download.)
        #expect(result.version == 2 && result.incremental == nil)
        try Self.expectEqualToScratch(fixture, template, label: "swap", checkPatch: false)
    }

    @Test("many rows deleted leave free pages: no row index, so the next publish builds a compact file")
    func freePagesForceARebuild() throws {
        let fixture = try PublisherFixture("inc-free", sql: Self.schema)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(Self.template)
        _ = try Self.publish(fixture, template)

        try fixture.execute("DELETE FROM items WHERE n < 60")
        let thinned = try Self.publish(fixture, template)
        #expect(thinned.incremental != nil)
        try Self.expectEqualToScratch(fixture, template, label: "thinned")
        #expect(!FileManager.default.fileExists(atPath: try Self.base(fixture.storeAccess, "inc").index.path))

        try fixture.execute("UPDATE items SET note = 'kept' WHERE id = 'item-00060'")
        let rebuilt = try Self.publish(fixture, template)
        #expect(
            rebuilt.version == 3 && rebuilt.incremental == nil && rebuilt.size! < thinned.size!,
            "\(rebuilt.size!) bytes rebuilt, \(thinned.size!) thinned")
    }

    @Test("twelve rounds of random changes: every version built from the previous one equals a build from scratch")
    func randomRounds() throws {
        let fixture = try PublisherFixture("inc-random", sql: Self.schema)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(Self.template)
        _ = try Self.publish(fixture, template)
        var generator = SeededGenerator(seed: 20_261_126)
        for round in 1...12 {
            let a = Int.random(in: 1...3000, using: &generator)
            let b = Int.random(in: 1...3000, using: &generator)
            try fixture.execute(
                """
                UPDATE items SET n = n + \(round), note = note || '\(round)' WHERE id > 'item-\(String(format: "%05d", min(a, b)))' AND id < 'item-\(String(format: "%05d", min(a, b) + 40))';
                DELETE FROM items WHERE id = 'item-\(String(format: "%05d", a))';
                INSERT INTO items (id, n, note) VALUES ('new-\(round)-\(b)', \(b), 'round \(round)') ON CONFLICT DO NOTHING;
                UPDATE pairs SET v = v + 1 WHERE a = \(b % 50);
                DELETE FROM counters WHERE id = \(a * 10);
                INSERT INTO counters VALUES (\(3_000_000 + round), \(round)) ON CONFLICT DO NOTHING;
                """)
            let result = try Self.publish(fixture, template)
            #expect(result.version == round + 1 && result.incremental != nil, "round \(round)")
            try Self.expectEqualToScratch(fixture, template, label: "round-\(round)")
        }
    }

    @Test("a scoped dataset: the scope that changed is built from its previous version, the others stay unchanged")
    func scopes() throws {
        let fixture = try PublisherFixture(
            "inc-scoped",
            sql: Self.schema
                + "\nALTER TABLE items ADD COLUMN region integer NOT NULL DEFAULT 0; UPDATE items SET region = n % 3;")
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(
            """
            dataset: inc-scoped
            scope:
              values: SELECT DISTINCT region FROM items
              token: "SELECT 1 WHERE $1::text IS NULL"
            tables:
              - name: items
                filter: "region = :scope"
            """)
        let v1 = try Self.publish(fixture, template)
        #expect(v1.scopes?.count == 3)

        try fixture.execute("UPDATE items SET note = 'scope one' WHERE id = 'item-00001'")  // n = 1: region 1
        let v2 = try Self.publish(fixture, template)

        let scopes = try #require(v2.scopes)
        #expect(scopes.map(\.unchanged) == [true, false, true])
        #expect(v2.incremental?.updated == 1 && v2.incremental?.inserted == 0 && v2.incremental?.deleted == 0)
        let file = try fixture.storeAccess.fileURL(dataset: "inc-scoped", sha256: scopes[1].sha256)
        let db = try SQLiteConnection(path: file.path, mode: .readOnly)
        #expect(try db.scalar("SELECT note FROM items WHERE id = 'item-00001'") == .text("scope one"))
        #expect(
            try ContentDigest.compute(db, tables: ["items"]).description == scopes[1].manifest.current.contentDigest)
    }
}
