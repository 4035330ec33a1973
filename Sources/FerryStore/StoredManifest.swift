import FerryCore
import Foundation

/// The store's description of a dataset, `STORE/DATASET/manifest.json`: one entry per scope, each with its retained
/// versions. An unscoped dataset is the special case of a single implicit scope (``ScopeEntry/scope`` nil), so
/// every dataset is published, stored, served and pruned by one code path. Never sent to a client as is: the server
/// answers each caller with its scope's ``Manifest`` (``ScopeEntry/manifest(dataset:)``), so no scope learns
/// another's checksums or even that it exists.
///
/// ```json
/// {"dataset":"campgrounds-tiered","scoped":true,"schemaVersion":1,"lastVersion":4,"createdAt":"…",
///  "scopes":[{"scope":"0","retained":[{…PublishedVersion…,"dataDigest":"…"}]}]}
/// {"dataset":"trips","scoped":false,"schemaVersion":1,"lastVersion":2,"createdAt":"…",
///  "scopes":[{"retained":[{"version":1,…},{"version":2,…}]}]}
/// ```
///
/// Version numbers are shared by the scopes of a dataset: a publish that changes any scope's data takes the next
/// number (``lastVersion`` + 1) and gives it to every scope whose data changed; an unchanged scope keeps its
/// version. Files are content-addressed (`objects/<sha256>.sqlite`), so scopes with identical content share a file.
/// ``ManifestDocument`` reads and writes it; a `manifest.json` of the legacy layout (a plain ``Manifest``) is read
/// by `FileSnapshotStore.storedManifest(for:)`.
public struct StoredManifest: Codable, Sendable, Equatable, ManifestDocument {
    public var dataset: String
    /// True for a template with `scope:` (every request must prove its scope); false for one implicit scope.
    public var scoped: Bool
    public var schemaVersion: Int
    /// The highest version number given so far; the next publish that changes data takes the one after.
    public var lastVersion: Int
    /// When this manifest was written by a publish that made a new version.
    public var createdAt: String
    /// One entry per scope value, sorted by ``ScopeEntry/scope``; exactly one, with a nil scope, when not ``scoped``.
    public var scopes: [ScopeEntry]
    /// Set when read from the layout written before content addressing (`versions/N.sqlite`, a ``Manifest`` as
    /// `manifest.json`): the files of version N are `versions/N.sqlite[.gz]`. Not encoded; see
    /// `FileSnapshotStore+Legacy.swift`.
    public internal(set) var isLegacyLayout = false
    /// When the operator dropped this schema line's template (docs/schema-lines.md), ISO-8601 UTC: the server then
    /// answers its URLs `410 Gone`. Nil for a live line and for every dataset that is not a line. The next publish of
    /// the line's template brings it back.
    public var retiredAt: String?
    /// How long, in seconds, each scope keeps the history a device catches up from by one patch (`--patch-horizon`;
    /// ``ScopeEntry/history``). Nil or 0: none beyond the retained versions, and no catch-up patches are served.
    public var patchHorizon: Int?
    /// For a partitioned dataset (docs/partitions.md): how its tables place their rows. Its scopes are the shared
    /// stream (``PartitionLayout/sharedStream``) and one per partition key. Nil for every other dataset.
    public var partitioning: PartitionLayout?
    /// The keys of partitions that had a snapshot and disappeared, sorted (at most the last 10,000): the server
    /// answers them `410 Gone`, so a device learns to unsubscribe. Nil when none.
    public var retiredPartitions: [String]?

    public init(
        dataset: String, scoped: Bool, schemaVersion: Int, lastVersion: Int, createdAt: String, scopes: [ScopeEntry]
    ) {
        self.dataset = dataset
        self.scoped = scoped
        self.schemaVersion = schemaVersion
        self.lastVersion = lastVersion
        self.createdAt = createdAt
        self.scopes = scopes
    }

    private enum CodingKeys: String, CodingKey {
        case dataset, scoped, schemaVersion, lastVersion, createdAt, scopes, retiredAt, patchHorizon, partitioning,
            retiredPartitions
    }

    /// The entry of scope value `scope` (nil: the implicit scope of an unscoped dataset), if it has a snapshot.
    public func entry(for scope: String?) -> ScopeEntry? {
        scopes.first { $0.scope == scope }
    }

    /// Every checksum a retained version of any scope names, its full files' (a checkpoint) or its step's, and its
    /// patches': the objects the store must keep.
    public var referencedObjects: Set<String> {
        Set(scopes.flatMap { $0.chain.flatMap(\.objectChecksums) })
    }

    /// `createdAt` of the oldest version still retained by any scope, or kept in its history: until it is gone a
    /// device may hold it, so tombstones and stored answers younger than this must stay.
    public var oldestRetainedCreatedAt: String? {
        scopes.flatMap(\.chain).map(\.createdAt).min()
    }

    /// Checks what a reader relies on: names, checksums, that each scope's versions are ascending and distinct.
    public func validate(path: String? = nil) throws {
        try DatasetName.validate(dataset, path: path)
        if !scoped {
            guard scopes.count <= 1, scopes.first?.scope == nil else {
                throw FerryError(
                    .store, "an unscoped dataset has one entry without a scope value", path: path, key: "scopes")
            }
        }
        if partitioning != nil {
            guard scoped else {
                throw FerryError(.store, "a partitioned dataset is stored as scoped", path: path, key: "scoped")
            }
            for (i, entry) in scopes.enumerated() where entry.scope != PartitionLayout.sharedStream {
                guard let key = entry.scope, PartitionLayout.isValidKey(key) else {
                    throw FerryError(.store, "a partition key is invalid", path: path, key: "scopes[\(i)].scope")
                }
            }
        }
        var seen: Set<String?> = []
        for (i, entry) in scopes.enumerated() {
            let key = "scopes[\(i)]"
            if scoped && entry.scope == nil {
                throw FerryError(
                    .store, "a scoped dataset's entry needs its scope value", path: path, key: "\(key).scope")
            }
            guard seen.insert(entry.scope).inserted else {
                throw FerryError(.store, "a scope is listed twice", path: path, key: key)
            }
            guard !entry.retained.isEmpty else {
                throw FerryError(.store, "a scope has at least its current version", path: path, key: "\(key).retained")
            }
            let numbers = entry.retained.map(\.version)
            guard numbers == numbers.sorted(), Set(numbers).count == numbers.count else {
                throw FerryError(
                    .store, "retained versions must be ascending and distinct", path: path, key: "\(key).retained")
            }
            guard entry.retained[0].isCheckpoint else {
                throw FerryError(
                    .store, "a scope's oldest retained version is a checkpoint", path: path, key: "\(key).retained[0]")
            }
            try Self.validateSteps(entry, path: path, key: key)
            for (j, record) in entry.retained.enumerated() {
                try record.published.validate(path: path, key: "\(key).retained[\(j)]")
                guard record.version <= lastVersion else {
                    throw FerryError(
                        .store, "a retained version is above lastVersion \(lastVersion)", path: path,
                        key: "\(key).retained[\(j)].version")
                }
            }
        }
    }
}

extension StoredManifest {
    /// Each step of a scope's history and retained versions leads from the version before it to its own, with that
    /// version's checksum as its base; the oldest has none (nothing before it is kept). History is ascending, older
    /// than the retained versions, and holds no full files.
    static func validateSteps(_ entry: ScopeEntry, path: String?, key: String) throws {
        let chain = entry.chain
        let numbers = chain.map(\.version)
        guard numbers == numbers.sorted(), Set(numbers).count == numbers.count,
            (entry.history ?? []).allSatisfy({ !$0.isCheckpoint })
        else {
            throw FerryError(
                .store, "history must be ascending, older than the retained versions, without full files", path: path,
                key: "\(key).history")
        }
        for (j, record) in chain.enumerated() {
            guard let step = record.step else { continue }
            guard j > 0, step.from == chain[j - 1].version, step.to == record.version,
                step.base == chain[j - 1].sha256, SHA256Hex.isValid(step.sha256), step.size >= 0
            else {
                throw FerryError(
                    .store,
                    "a step must lead from the version before it to this one, with that version's checksum as its base",
                    path: path, key: "\(key).version \(record.version).step")
            }
        }
    }
}

/// One scope's snapshots within a ``StoredManifest``: every retained version's record, oldest first, the current
/// one last. `entry.version`, `entry.sha256`, … read the current version's fields.
@dynamicMemberLookup
public struct ScopeEntry: Codable, Sendable, Equatable {
    /// The scope value in PostgreSQL's text form (`0`, `premium`, a tenant id); nil for an unscoped dataset's
    /// single implicit scope.
    public var scope: String?
    /// Retained versions, ascending; never empty. The oldest is a checkpoint.
    public var retained: [VersionRecord]
    /// Versions older than the retained ones, kept within the patch horizon for their steps only (no full files,
    /// no patches of their own): what a device catches up from (docs/delta.md, "Catching up"). Nil when none.
    public var history: [VersionRecord]?

    public init(scope: String?, retained: [VersionRecord]) {
        precondition(!retained.isEmpty, "a scope has at least its current version")
        self.scope = scope
        self.retained = retained
    }

    /// The current version's record.
    public var current: VersionRecord { retained[retained.count - 1] }

    /// The history and the retained versions, oldest first.
    public var chain: [VersionRecord] { (history ?? []) + retained }

    /// The oldest version from which the steps lead without a gap to the current version.
    public var catchUpFrom: Int {
        let chain = chain
        var index = chain.count - 1
        while index > 0, chain[index].step != nil { index -= 1 }
        return chain[index].version
    }

    public subscript<T>(dynamicMember keyPath: KeyPath<PublishedVersion, T>) -> T {
        current.published[keyPath: keyPath]
    }

    /// The record of retained version `version`, if any.
    public func record(version: Int) -> VersionRecord? {
        retained.first { $0.version == version }
    }

    /// What a client of this scope sees at `GET /v1/datasets/{dataset}/manifest`: `versions` are those served whole,
    /// so not the ones kept only to catch up from (``VersionRecord/catchUpOnly``).
    public func manifest(dataset: String) -> Manifest {
        Manifest(
            dataset: dataset, current: current.published,
            versions: retained.filter { $0.catchUpOnly != true }.map(\.version))
    }
}
