import Foundation

/// The description of a dataset's latest snapshot: written by the publisher as `manifest.json`, served by the
/// server at `GET /v1/datasets/{dataset}/manifest`, read by clients. The wire format is a contract:
/// new fields may be added, none renamed or removed.
///
/// ```json
/// {"dataset":"campgrounds","version":3,"sha256":"…","size":49152,"gzipSize":8120,
///  "createdAt":"2026-11-21T10:00:00.000Z","schemaVersion":1,"tables":{"campgrounds":120},"versions":[1,2,3]}
/// ```
public struct Manifest: Codable, Sendable, Equatable {
    /// Dataset name, `[a-z0-9_-]+`.
    public var dataset: String
    /// The latest version, an integer increasing by one per publish that changed data.
    public var version: Int
    /// SHA-256 hex of the SQLite file: its checksum and its strong ETag.
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
    /// Retained version numbers, ascending; each is served at `/v1/datasets/{dataset}/versions/{n}`.
    public var versions: [Int]

    public init(
        dataset: String, version: Int, sha256: String, size: Int64, gzipSize: Int64, createdAt: String,
        schemaVersion: Int, tables: [String: Int], versions: [Int]
    ) {
        self.dataset = dataset
        self.version = version
        self.sha256 = sha256
        self.size = size
        self.gzipSize = gzipSize
        self.createdAt = createdAt
        self.schemaVersion = schemaVersion
        self.tables = tables
        self.versions = versions
    }

    /// Encodes as compact JSON with sorted keys (stable bytes for equal manifests).
    public func jsonData(pretty: Bool = false) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
    }

    /// Decodes and validates a manifest (dataset name, checksum form, sizes).
    public static func decode(_ data: Data, path: String? = nil) throws -> Manifest {
        let manifest: Manifest
        do {
            manifest = try JSONDecoder().decode(Manifest.self, from: data)
        } catch {
            throw FerryError(.store, "manifest is not valid JSON of the expected shape: \(error)", path: path)
        }
        try manifest.validate(path: path)
        return manifest
    }

    /// Checks the fields a reader relies on; never trust a file or the network.
    public func validate(path: String? = nil) throws {
        try DatasetName.validate(dataset, path: path)
        guard version >= 1 else { throw FerryError(.store, "version must be >= 1", path: path, key: "version") }
        guard SHA256Hex.isValid(sha256) else {
            throw FerryError(.store, "sha256 must be 64 lowercase hex digits", path: path, key: "sha256")
        }
        guard size >= 0, gzipSize >= 0 else { throw FerryError(.store, "sizes must not be negative", path: path, key: "size") }
    }
}

/// What the store keeps about one published version (`versions/N.json`): the manifest fields of that version
/// plus the digest of the exported rows, which lets the publisher tell "unchanged" without comparing files.
public struct VersionRecord: Codable, Sendable, Equatable {
    public var version: Int
    public var sha256: String
    public var size: Int64
    public var gzipSize: Int64
    public var createdAt: String
    public var schemaVersion: Int
    public var tables: [String: Int]
    /// SHA-256 hex over the exported rows and schema (not the file bytes, whose metadata differs per version).
    public var dataDigest: String

    public init(
        version: Int, sha256: String, size: Int64, gzipSize: Int64, createdAt: String, schemaVersion: Int,
        tables: [String: Int], dataDigest: String
    ) {
        self.version = version
        self.sha256 = sha256
        self.size = size
        self.gzipSize = gzipSize
        self.createdAt = createdAt
        self.schemaVersion = schemaVersion
        self.tables = tables
        self.dataDigest = dataDigest
    }

    /// The manifest for this version within `dataset`, listing `versions` as retained.
    public func manifest(dataset: String, versions: [Int]) -> Manifest {
        Manifest(
            dataset: dataset, version: version, sha256: sha256, size: size, gzipSize: gzipSize, createdAt: createdAt,
            schemaVersion: schemaVersion, tables: tables, versions: versions)
    }
}
