import Foundation

/// The store's description of a scoped dataset (a template with `scope:`): one snapshot per scope value, written by
/// the publisher as `manifest.json` in place of a ``Manifest``. Never sent to a client as is: the server answers each
/// caller with its own scope's ``Manifest`` (``ScopeEntry/manifest(dataset:)``), so no scope learns another's
/// checksums or even that it exists.
///
/// ```json
/// {"dataset":"campgrounds-tiered","scoped":true,"schemaVersion":1,"lastVersion":4,"createdAt":"…",
///  "scopes":[{"scope":"0","version":4,"sha256":"…","size":49152,"retained":[{…VersionRecord…}]}]}
/// ```
///
/// Version numbers are shared by the scopes of a dataset: a publish that changes any scope's data takes the next
/// number (``lastVersion`` + 1) and gives it to every scope whose data changed; an unchanged scope keeps its
/// version. Files are content-addressed (`objects/<sha256>.sqlite`), so scopes with identical content share a file.
public struct ScopedManifest: Codable, Sendable, Equatable {
    public var dataset: String
    /// Always true: tells a scoped manifest from a ``Manifest`` when reading `manifest.json`.
    public var scoped: Bool
    public var schemaVersion: Int
    /// The highest version number given so far; the next publish that changes data takes the one after.
    public var lastVersion: Int
    /// When this manifest was written (the last publish that changed anything).
    public var createdAt: String
    /// One entry per scope value, sorted by ``ScopeEntry/scope``.
    public var scopes: [ScopeEntry]

    public init(dataset: String, schemaVersion: Int, lastVersion: Int, createdAt: String, scopes: [ScopeEntry]) {
        self.dataset = dataset
        self.scoped = true
        self.schemaVersion = schemaVersion
        self.lastVersion = lastVersion
        self.createdAt = createdAt
        self.scopes = scopes
    }

    /// The entry of scope value `scope`, if it has a snapshot.
    public func entry(for scope: String) -> ScopeEntry? {
        scopes.first { $0.scope == scope }
    }

    /// Every checksum a retained version of any scope names: the files the store must keep.
    public var referencedObjects: Set<String> {
        Set(scopes.flatMap { $0.retained.map(\.sha256) })
    }

    public func jsonData() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
    }

    /// Checks what a reader relies on: names, checksums, that each scope's current version is retained, ascending.
    public func validate(path: String? = nil) throws {
        try DatasetName.validate(dataset, path: path)
        guard scoped else { throw FerryError(.store, "a scoped manifest must say \"scoped\": true", path: path, key: "scoped") }
        var seen: Set<String> = []
        for (i, entry) in scopes.enumerated() {
            let key = "scopes[\(i)]"
            guard seen.insert(entry.scope).inserted else { throw FerryError(.store, "scope '\(entry.scope)' is listed twice", path: path, key: key) }
            guard let current = entry.retained.last, current.version == entry.version, current.sha256 == entry.sha256 else {
                throw FerryError(.store, "the current version must be the last retained one", path: path, key: "\(key).retained")
            }
            guard entry.retained.map(\.version) == entry.retained.map(\.version).sorted(), Set(entry.retained.map(\.version)).count == entry.retained.count
            else { throw FerryError(.store, "retained versions must be ascending and distinct", path: path, key: "\(key).retained") }
            for record in entry.retained {
                guard record.version >= 1, record.version <= lastVersion, SHA256Hex.isValid(record.sha256), record.size >= 0, record.gzipSize >= 0 else {
                    throw FerryError(.store, "a retained version has a bad number, checksum or size", path: path, key: "\(key).retained")
                }
            }
        }
    }
}

/// One scope value's snapshots within a ``ScopedManifest``: its current version (repeated at the top for reading)
/// and every retained version's record, oldest first, the current one last.
public struct ScopeEntry: Codable, Sendable, Equatable {
    /// The scope value in PostgreSQL's text form (`0`, `premium`, a tenant id).
    public var scope: String
    public var version: Int
    public var sha256: String
    public var size: Int64
    public var retained: [VersionRecord]

    public init(scope: String, retained: [VersionRecord]) {
        precondition(!retained.isEmpty, "a scope has at least its current version")
        self.scope = scope
        self.retained = retained
        version = retained.last!.version
        sha256 = retained.last!.sha256
        size = retained.last!.size
    }

    /// The current version's record.
    public var current: VersionRecord { retained.last! }

    /// The record of retained version `version`, if any.
    public func record(version: Int) -> VersionRecord? {
        retained.first { $0.version == version }
    }

    /// What a client of this scope sees at `GET /v1/datasets/{dataset}/manifest`: an ordinary ``Manifest``.
    public func manifest(dataset: String) -> Manifest {
        current.manifest(dataset: dataset, versions: retained.map(\.version))
    }
}

/// What `manifest.json` holds: one snapshot for everyone, or one per scope.
public enum StoredManifest: Sendable, Equatable {
    case single(Manifest)
    case scoped(ScopedManifest)

    /// Decodes either form, telling them apart by the `scoped` key.
    public static func decode(_ data: Data, path: String? = nil) throws -> StoredManifest {
        struct Probe: Decodable { var scoped: Bool? }
        guard (try? JSONDecoder().decode(Probe.self, from: data))?.scoped == true else {
            return .single(try Manifest.decode(data, path: path))
        }
        let manifest: ScopedManifest
        do {
            manifest = try JSONDecoder().decode(ScopedManifest.self, from: data)
        } catch {
            throw FerryError(.store, "scoped manifest is not valid JSON of the expected shape: \(error)", path: path)
        }
        try manifest.validate(path: path)
        return .scoped(manifest)
    }

    public var dataset: String {
        switch self {
        case .single(let m): m.dataset
        case .scoped(let m): m.dataset
        }
    }

    /// The highest version number this manifest has given out.
    public var lastVersion: Int {
        switch self {
        case .single(let m): m.version
        case .scoped(let m): m.lastVersion
        }
    }
}
