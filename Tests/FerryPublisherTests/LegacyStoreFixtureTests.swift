import FerryCore
import FerryStore
import Foundation
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

/// Stores written by the code before content addressing (commit 185816f), committed byte for byte under
/// Tests/Fixtures/legacy-store (its README says how they were made): `trips` in the `versions/N` layout with a plain
/// manifest, and `campgrounds-tiered` as that code's scoped manifest over `objects/`. Today's code must read both as
/// they are and publish on top of them without losing a retained version.
@Suite("A store written by the code before one layout")
struct LegacyStoreFixtureTests {
    static let fixture = TestPaths.packageRoot.appendingPathComponent("Tests/Fixtures/legacy-store")

    static var sampleSQL: String {
        get throws {
            let templates = TestPaths.packageRoot.appendingPathComponent("templates")
            return try String(contentsOf: templates.appendingPathComponent("trips.pg.sql"), encoding: .utf8)
                + String(contentsOf: templates.appendingPathComponent("campgrounds.pg.sql"), encoding: .utf8)
        }
    }

    static func template(_ name: String) -> String {
        TestPaths.packageRoot.appendingPathComponent("templates/\(name).yml").path
    }

    /// A copy of the committed stores at `fixture.store`, so the test may migrate and publish into it.
    static func copyFixture(to fixture: PublisherFixture) throws {
        try FileManager.default.copyItem(at: Self.fixture, to: fixture.store)
        // The README describes the fixture; it is not part of a store.
        try FileManager.default.removeItem(at: fixture.store.appendingPathComponent("README.md"))
    }

    /// The (sha256, gzip inflates to the same bytes) of a version's files.
    static func expectFiles(_ files: SnapshotFiles, sha256: String, in directory: TemporaryDirectory) throws {
        #expect(try FileDigest.sha256Hex(of: files.snapshot) == sha256, "\(files.snapshot.path)")
        let unzipped = directory.appending("inflated-\(UUID().uuidString).sqlite")
        // scratch in the test's temp dir, removed with it anyway
        defer { try? FileManager.default.removeItem(at: unzipped) }
        try Gzip.decompressFile(from: files.gzip, to: unzipped)
        #expect(try FileDigest.sha256Hex(of: unzipped) == sha256, "\(files.gzip.path)")
    }

    @Test(
        "the versions/N store is served as the old code served it; the next publish migrates it and keeps versions 1 and 2"
    )
    func unscopedVersionsLayout() throws {
        let fixture = try PublisherFixture("legacy-trips", sql: try Self.sampleSQL)
        defer { fixture.cleanUp() }
        try Self.copyFixture(to: fixture)
        let store = fixture.storeAccess
        let oldManifestData = try Data(contentsOf: Self.fixture.appendingPathComponent("trips/manifest.json"))
        let oldManifest = try Manifest.decode(oldManifestData)

        // Read as it is: the client's manifest equals the one the old code wrote, the files are versions/N
        let read = try store.requireManifest("trips")
        #expect(read.isLegacyLayout && !read.scoped && read.lastVersion == 2)
        #expect(try store.manifest(for: "trips") == oldManifest)
        #expect(oldManifest.version == 2 && oldManifest.versions == [1, 2])
        var shas: [Int: String] = [:]
        for record in read.scopes[0].retained {
            let files = store.files(of: record, in: read)
            #expect(files.snapshot.path.hasSuffix("/trips/versions/\(record.version).sqlite"))
            try Self.expectFiles(files, sha256: record.sha256, in: fixture.directory)
            shas[record.version] = record.sha256
        }
        #expect(shas[2] == oldManifest.sha256)

        // When today's publisher publishes changed data on top
        try fixture.execute("UPDATE trips SET bags = bags + 1 WHERE name = 'Växjö-Kalmar'")
        let result = try fixture.publish(template: Self.template("trips"))

        // Then the store is migrated, the new version is 3, and versions 1 and 2 keep their bytes
        #expect(!result.unchanged && result.version == 3)
        let migrated = try store.requireManifest("trips")
        #expect(!migrated.isLegacyLayout && migrated.lastVersion == 3)
        #expect(migrated.scopes[0].retained.map(\.version) == [1, 2, 3])
        for record in migrated.scopes[0].retained {
            if let old = shas[record.version] { #expect(record.sha256 == old) }
            try Self.expectFiles(store.files(of: record, in: migrated), sha256: record.sha256, in: fixture.directory)
        }
        #expect(!FileManager.default.fileExists(atPath: fixture.store.appendingPathComponent("trips/versions").path))
        #expect(try store.manifest(for: "trips")?.versions == [1, 2, 3])
    }

    @Test(
        "the old scoped manifest is read as it is, and a publish on top gives every scope version 3 beside its old ones"
    )
    func scopedObjectsLayout() throws {
        let fixture = try PublisherFixture("legacy-tiered", sql: try Self.sampleSQL)
        defer { fixture.cleanUp() }
        try Self.copyFixture(to: fixture)
        let store = fixture.storeAccess

        // Read as it is: two scopes, each retaining versions 1 and 2, every file where the manifest says
        let read = try store.requireManifest("campgrounds-tiered")
        #expect(!read.isLegacyLayout && read.scoped && read.lastVersion == 2)
        #expect(read.scopes.map(\.scope) == ["0", "2"])
        var shas: [String: [Int: String]] = [:]
        for entry in read.scopes {
            #expect(entry.retained.map(\.version) == [1, 2])
            #expect(entry.manifest(dataset: "campgrounds-tiered").versions == [1, 2])
            for record in entry.retained {
                try Self.expectFiles(store.files(of: record, in: read), sha256: record.sha256, in: fixture.directory)
                shas[entry.scope ?? "", default: [:]][record.version] = record.sha256
            }
        }

        // When today's publisher publishes changed data on top
        try fixture.execute("UPDATE campgrounds SET name = name || ' (again)'")
        let result = try fixture.publish(template: Self.template("campgrounds-tiered"))

        // Then each scope has version 3 and still its versions 1 and 2, with their old bytes
        #expect(!result.unchanged && result.version == 3)
        let after = try store.requireManifest("campgrounds-tiered")
        #expect(after.lastVersion == 3 && after.scopes.map(\.scope) == ["0", "2"])
        for entry in after.scopes {
            #expect(entry.retained.map(\.version) == [1, 2, 3])
            for record in entry.retained {
                if let old = shas[entry.scope ?? ""]?[record.version] { #expect(record.sha256 == old) }
                try Self.expectFiles(store.files(of: record, in: after), sha256: record.sha256, in: fixture.directory)
            }
        }
    }
}
