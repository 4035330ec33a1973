import FerryCore
import FerryStore
import Foundation
import Testing

/// A scope's history (docs/delta.md, "Catching up"): versions kept for their steps only, which a device catches up
/// from, and which keep tombstones and stored answers alive.
@Suite struct HistoryTests {
    static func sha(_ n: Int) -> String { String(repeating: String(n % 10), count: 64) }

    /// Version `n`, created on day `n` of November, stored as the step from `n - 1` unless `checkpoint`.
    static func record(_ n: Int, checkpoint: Bool, step: Bool = true) -> VersionRecord {
        VersionRecord(
            published: PublishedVersion(
                version: n, sha256: sha(n), size: 4096, gzipSize: checkpoint ? 1000 : 0,
                createdAt: String(format: "2026-11-%02dT10:00:00.000Z", n), schemaVersion: 1, tables: ["t": n]),
            dataDigest: sha(n + 1),
            step: step && n > 1
                ? PatchRef(from: n - 1, to: n, size: 100, sha256: sha(n + 5), base: sha(n - 1)) : nil,
            checkpoint: checkpoint)
    }

    static func manifest(history: [VersionRecord], retained: [VersionRecord]) -> StoredManifest {
        var entry = ScopeEntry(scope: nil, retained: retained)
        entry.history = history.isEmpty ? nil : history
        var manifest = StoredManifest(
            dataset: "trips", scoped: false, schemaVersion: 1, lastVersion: retained.last!.version,
            createdAt: retained.last!.createdAt, scopes: [entry])
        manifest.patchHorizon = 30 * 86_400
        return manifest
    }

    @Test("the history keeps tombstones and answers alive, names its steps as objects, and says where catch-up starts")
    func historyCounts() throws {
        var first = Self.record(1, checkpoint: false, step: false)
        first.published.patches = nil
        let manifest = Self.manifest(
            history: [first, Self.record(2, checkpoint: false)],
            retained: [Self.record(3, checkpoint: true), Self.record(4, checkpoint: false)])
        try manifest.validate()
        // A device on version 1 may come back: tombstones and stored answers younger than it stay
        #expect(manifest.oldestRetainedCreatedAt == "2026-11-01T10:00:00.000Z")
        #expect(manifest.scopes[0].catchUpFrom == 1)
        // The history's steps are kept, its full files are not
        let objects = manifest.referencedObjects
        #expect(objects.contains(Self.sha(2 + 5)) && objects.contains(Self.sha(4 + 5)))
        #expect(!objects.contains(Self.sha(1)) && !objects.contains(Self.sha(2)) && objects.contains(Self.sha(3)))
        // The manifest round-trips through its JSON
        #expect(try StoredManifest.decode(manifest.jsonData()) == manifest)
    }

    @Test(
        "a history that claims full files, a step from the wrong version, or a retained list not starting at a checkpoint is refused"
    )
    func invalidHistory() throws {
        let checkpointInHistory = Self.manifest(
            history: [Self.record(1, checkpoint: true, step: false)], retained: [Self.record(2, checkpoint: true)])
        #expect(throws: FerryError.self) { try checkpointInHistory.validate() }
        var wrongBase = Self.record(2, checkpoint: false)
        wrongBase.step?.base = Self.sha(9)
        let broken = Self.manifest(history: [], retained: [Self.record(1, checkpoint: true, step: false), wrongBase])
        #expect(throws: FerryError.self) { try broken.validate() }
        let startsWithStep = Self.manifest(
            history: [], retained: [Self.record(1, checkpoint: false, step: false), Self.record(2, checkpoint: false)])
        #expect(throws: FerryError.self) { try startsWithStep.validate() }
        // A gap in the steps (a schema version bump) ends where catch-up starts
        let gap = Self.manifest(
            history: [],
            retained: [
                Self.record(1, checkpoint: true, step: false), Self.record(2, checkpoint: true, step: false),
                Self.record(3, checkpoint: false),
            ])
        try gap.validate()
        #expect(gap.scopes[0].catchUpFrom == 2)
    }
}
