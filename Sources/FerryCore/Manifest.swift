import Foundation

/// One published version of a dataset (or of one scope of a scoped dataset): the one type that describes a
/// version. ``Manifest``, the store's `VersionRecord` (FerryStore) and the publisher's result embed it instead of
/// repeating its fields.
///
/// ```swift
/// let v = PublishedVersion(version: 3, sha256: hex, size: 49152, gzipSize: 8120,
///                          createdAt: "2026-11-21T10:00:00.000Z", schemaVersion: 1, tables: ["campgrounds": 120])
/// ```
public struct PublishedVersion: Codable, Sendable, Equatable {
    /// An integer increasing with each publish that changed data; never reused within a dataset.
    public var version: Int
    /// SHA-256 hex of the SQLite file: its checksum, its strong ETag and its object name in the store.
    public var sha256: String
    /// Size of the SQLite file in bytes.
    public var size: Int64
    /// Size of the stored gzip copy in bytes.
    public var gzipSize: Int64
    /// When the snapshot was made, ISO-8601 UTC with milliseconds.
    public var createdAt: String
    /// The template's schemaVersion: bumped by the operator when the SQLite schema changes incompatibly.
    public var schemaVersion: Int
    /// Rows per table.
    public var tables: [String: Int]
    /// Row-level patches that turn an older retained version into this one, served at
    /// `/v1/datasets/{dataset}/patches/{from}-{to}`; nil when there are none (the first version, a schema change,
    /// or every patch would be larger than the gzip copy).
    public var patches: [PatchRef]?
    /// The ``ContentDigest`` of the published tables' rows (64 hex digits): what a patched database must hold.
    /// Nil in records written before it existed.
    public var contentDigest: String?

    public init(
        version: Int, sha256: String, size: Int64, gzipSize: Int64, createdAt: String, schemaVersion: Int,
        tables: [String: Int],
        patches: [PatchRef]? = nil, contentDigest: String? = nil
    ) {
        self.version = version
        self.sha256 = sha256
        self.size = size
        self.gzipSize = gzipSize
        self.createdAt = createdAt
        self.schemaVersion = schemaVersion
        self.tables = tables
        self.patches = patches
        self.contentDigest = contentDigest
    }

    /// The patch from version `from` to this one, if published.
    public func patch(from: Int) -> PatchRef? {
        patches?.first { $0.from == from }
    }

    /// Checks the fields a reader relies on; `key` prefixes the reported key (`scopes[0].retained[1]`).
    package func validate(path: String?, key: String? = nil) throws {
        func named(_ field: String) -> String { key.map { "\($0).\(field)" } ?? field }
        guard version >= 1 else { throw FerryError(.store, "version must be >= 1", path: path, key: named("version")) }
        guard SHA256Hex.isValid(sha256) else {
            throw FerryError(.store, "sha256 must be 64 lowercase hex digits", path: path, key: named("sha256"))
        }
        guard size >= 0, gzipSize >= 0 else {
            throw FerryError(.store, "sizes must not be negative", path: path, key: named("size"))
        }
        if let contentDigest, ContentDigest(hex: contentDigest) == nil {
            throw FerryError(
                .store, "contentDigest must be 64 lowercase hex digits", path: path, key: named("contentDigest"))
        }
        for (i, patch) in (patches ?? []).enumerated() {
            guard patch.to == version, patch.from >= 1, patch.from < version, SHA256Hex.isValid(patch.sha256),
                patch.size >= 0,
                patch.base.map(SHA256Hex.isValid) ?? true
            else {
                throw FerryError(
                    .store, "a patch must lead from an older version to this one, with a checksum and size", path: path,
                    key: named("patches[\(i)]"))
            }
        }
    }
}

/// A published patch: a gzip-compressed SQLite changeset (``Changeset``) that turns version `from` into version `to`.
/// Its `sha256` (of the compressed bytes, as served) names the stored object and is its ETag.
///
/// ```json
/// {"from":3,"to":4,"size":18211,"sha256":"…","base":"…"}
/// ```
public struct PatchRef: Codable, Sendable, Equatable {
    public var from: Int
    public var to: Int
    /// Bytes of the compressed patch.
    public var size: Int64
    /// SHA-256 hex of the compressed patch.
    public var sha256: String
    /// SHA-256 hex of the version `from` file the patch applies to. Scopes share version numbers, so the number
    /// alone does not say whose version 3 a device holds; a device whose scope changed has another base and takes the
    /// full download. Nil in records written before it existed (clients then take the full download).
    public var base: String?

    public init(from: Int, to: Int, size: Int64, sha256: String, base: String? = nil) {
        self.from = from
        self.to = to
        self.size = size
        self.sha256 = sha256
        self.base = base
    }
}

/// The description of a dataset's latest snapshot as a client sees it: served at
/// `GET /v1/datasets/{dataset}/manifest` (for a scoped dataset, the caller's scope's), read by clients. The wire
/// format is a contract: new fields may be added, none renamed or removed. The version's fields are those of
/// ``PublishedVersion``, flattened into the object.
///
/// ```json
/// {"dataset":"campgrounds","version":3,"sha256":"…","size":49152,"gzipSize":8120,
///  "createdAt":"2026-11-21T10:00:00.000Z","schemaVersion":1,"tables":{"campgrounds":120},"versions":[1,2,3]}
/// ```
@dynamicMemberLookup
public struct Manifest: Codable, Sendable, Equatable, ManifestDocument {
    /// Dataset name, `[a-z0-9_-]+`.
    public var dataset: String
    /// The latest version.
    public var current: PublishedVersion
    /// Retained version numbers, ascending; each is served at `/v1/datasets/{dataset}/versions/{n}`.
    public var versions: [Int]
    /// The oldest version a device can catch up from by one patch: from any version `v` from this one up to the
    /// current one, the server answers `/v1/datasets/{dataset}/patches/{v}-{version}` with the net change, made on
    /// first request from the versions' history (docs/delta.md, "Catching up"). Nil when the server keeps no
    /// history (`--patch-horizon 0`): then only the patches `current.patches` names exist.
    public var catchUpFrom: Int?
    /// When the current version is stored as a step (docs/delta.md, "Checkpoints and steps"): the newest checkpoint
    /// before it, whose file the server serves from the store, and from which `current.patches` names a patch to the
    /// current version. A device with nothing to patch from downloads this version whole (`/versions/{n}`, verified
    /// by its SHA-256) and applies that patch, instead of asking the server to build the current file. Nil when
    /// the current version is itself a checkpoint.
    public var checkpoint: PublishedVersion?

    public init(
        dataset: String, current: PublishedVersion, versions: [Int], catchUpFrom: Int? = nil,
        checkpoint: PublishedVersion? = nil
    ) {
        self.dataset = dataset
        self.current = current
        self.versions = versions
        self.catchUpFrom = catchUpFrom
        self.checkpoint = checkpoint
    }

    /// The manifest from its wire fields.
    public init(
        dataset: String, version: Int, sha256: String, size: Int64, gzipSize: Int64, createdAt: String,
        schemaVersion: Int, tables: [String: Int], versions: [Int]
    ) {
        self.init(
            dataset: dataset,
            current: PublishedVersion(
                version: version, sha256: sha256, size: size, gzipSize: gzipSize, createdAt: createdAt,
                schemaVersion: schemaVersion,
                tables: tables),
            versions: versions)
    }

    /// `manifest.version`, `manifest.sha256`, …: the current version's fields.
    public subscript<T>(dynamicMember keyPath: WritableKeyPath<PublishedVersion, T>) -> T {
        get { current[keyPath: keyPath] }
        set { current[keyPath: keyPath] = newValue }
    }

    private enum CodingKeys: String, CodingKey { case dataset, versions, catchUpFrom, checkpoint }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        dataset = try container.decode(String.self, forKey: .dataset)
        versions = try container.decode([Int].self, forKey: .versions)
        catchUpFrom = try container.decodeIfPresent(Int.self, forKey: .catchUpFrom)
        checkpoint = try container.decodeIfPresent(PublishedVersion.self, forKey: .checkpoint)
        current = try PublishedVersion(from: decoder)
    }

    public func encode(to encoder: any Encoder) throws {
        try current.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(dataset, forKey: .dataset)
        try container.encode(versions, forKey: .versions)
        try container.encodeIfPresent(catchUpFrom, forKey: .catchUpFrom)
        try container.encodeIfPresent(checkpoint, forKey: .checkpoint)
    }

    /// Checks the fields a reader relies on; never trust a file or the network.
    public func validate(path: String? = nil) throws {
        try DatasetName.validate(dataset, path: path)
        try current.validate(path: path)
        if let catchUpFrom, catchUpFrom < 1 || catchUpFrom >= current.version {
            throw FerryError(
                .store, "catchUpFrom must name a version before the current one", path: path, key: "catchUpFrom")
        }
        if let checkpoint {
            try checkpoint.validate(path: path, key: "checkpoint")
            guard checkpoint.version < current.version else {
                throw FerryError(
                    .store, "checkpoint must name a version before the current one", path: path, key: "checkpoint")
            }
        }
    }
}
