import FerryCore
import FerryStore
import Foundation
import Logging
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

/// The publisher writes row-level patches (SQLite changesets) from every retained version to the new one.
@Suite("Publisher: patches between versions")
struct PatchPublishTests {
    /// Applies the stored patch `from` → `to` to a copy of version `from` and returns the copy.
    static func patched(_ fixture: PublisherFixture, from: Int, to: Int) throws -> URL {
        let store = fixture.storeAccess
        let ref = try #require(try store.record(dataset: "trips", version: to)?.published.patch(from: from))
        let copy = fixture.directory.appending("device-\(from)-\(to).sqlite")
        try? FileManager.default.removeItem(at: copy)  // a fresh copy per call; none may exist yet
        try FileManager.default.copyItem(at: try store.snapshotURL(dataset: "trips", version: from), to: copy)
        let db = try SQLiteConnection(path: copy.path)
        let patch = try store.loadPatch(dataset: "trips", ref)
        try db.transaction { try patch.apply(to: db) { _ in .abort } }
        return copy
    }

    static func rows(_ url: URL) throws -> [[SQLiteValue]] {
        let db = try SQLiteConnection(path: url.path, mode: .readOnly)
        return try db.query("SELECT * FROM trips ORDER BY id")
            + db.query("SELECT name, rows FROM ferry_tables ORDER BY name")
    }

    /// Without a patch horizon (`history: false`), each version stores patches from up to 4 versions before it; with
    /// one, only the step, and the server merges the rest on request (CatchUpTests).
    @Test("inserts, updates and deletes travel as a patch; a device two versions behind gets one combined patch")
    func patchesAcrossVersions() throws {
        let fixture = try PublisherFixture("patches", sql: PublishTests.trips)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(PublishTests.tripsTemplate)
        let v1 = try fixture.publish(template: template, history: false)
        #expect(v1.manifest?.current.patches == nil)

        // When a row is updated, one inserted and one deleted
        try fixture.execute(
            """
            UPDATE trips SET bags = 7, "updatedAt" = now() WHERE id = 'a';
            INSERT INTO trips VALUES ('c', 'Göteborg-Malmö', 1, 3, now(), now());
            DELETE FROM trips WHERE id = 'b';
            """)
        let v2 = try fixture.publish(template: template, history: false)
        // Then version 2 names a patch from 1, smaller than the gzip copy of version 1 (the checkpoint: version 2 is
        // stored as that patch, its step), and it turns v1 into v2's rows
        let patch12 = try #require(v2.manifest?.current.patch(from: 1))
        #expect(patch12.to == 2 && patch12.size < v1.manifest!.gzipSize)
        #expect(try fixture.storeAccess.requireManifest("trips").scopes[0].current.step == patch12)
        #expect(
            FileManager.default.fileExists(
                atPath: fixture.storeAccess.patchURL(dataset: "trips", sha256: patch12.sha256).path))
        #expect(
            try Self.rows(Self.patched(fixture, from: 1, to: 2))
                == Self.rows(fixture.storeAccess.snapshotURL(dataset: "trips", version: 2)))

        // When more rows change, version 3 has patches from 1 and from 2
        try fixture.execute(
            "UPDATE trips SET passengers = 9 WHERE id = 'c'; INSERT INTO trips VALUES ('d', 'Lund-Malmö', 0, 0, now(), now());"
        )
        let v3 = try fixture.publish(template: template, history: false)
        #expect(v3.manifest?.current.patches?.map(\.from) == [1, 2])
        let v3Rows = try Self.rows(fixture.storeAccess.snapshotURL(dataset: "trips", version: 3))
        #expect(try Self.rows(Self.patched(fixture, from: 1, to: 3)) == v3Rows)
        #expect(try Self.rows(Self.patched(fixture, from: 2, to: 3)) == v3Rows)

        // And the manifest clients read lists the patches to the latest version
        let served = try #require(try fixture.storeAccess.manifest(for: "trips"))
        #expect(served.current.patches?.map(\.from) == [1, 2])
    }

    @Test("retention removes a version's patches with it; a schema version bump publishes no patch")
    func retentionAndSchemaBump() throws {
        let fixture = try PublisherFixture("patches-keep", sql: PublishTests.trips)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate(PublishTests.tripsTemplate)
        for bags in 1...3 {
            try fixture.execute("UPDATE trips SET bags = \(bags) WHERE id = 'a'")
            _ = try fixture.publish(template: template, keep: 2, checkpointAt: 0, history: false)
        }
        // Then (every version a checkpoint, so --keep counts versions, and no history) only versions 2 and 3 remain, with 3's patch
        // from 2 (and 2's patch from 1 until 2 goes); 3's step is its patch from 2
        let manifest = try fixture.storeAccess.requireManifest("trips")
        #expect(manifest.scopes[0].retained.map(\.version) == [2, 3])
        #expect(manifest.scopes[0].current.published.patches?.map(\.from) == [2])
        let files = try fixture.storeAccess.objectFileNames(dataset: "trips")
        #expect(
            Set(files.filter { $0.hasSuffix(".patch.gz") }.map { String($0.dropLast(9)) })
                == manifest.referencedObjects.subtracting(manifest.scopes[0].retained.map(\.sha256)))
        #expect(files.filter { $0.hasSuffix(".patch.gz") }.count == 2)

        // When the template's schemaVersion is bumped, the new version has no patch: devices take it in full
        let bumped = try fixture.writeTemplate(
            PublishTests.tripsTemplate.replacingOccurrences(
                of: "dataset: trips", with: "dataset: trips\nschemaVersion: 2"), name: "v2.yml")
        try fixture.execute("UPDATE trips SET bags = 9 WHERE id = 'a'")
        let next = try fixture.publish(template: bumped, keep: 2, checkpointAt: 0, history: false)
        #expect(next.manifest?.schemaVersion == 2 && next.manifest?.current.patches == nil)
    }
}
