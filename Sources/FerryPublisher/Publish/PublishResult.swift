import FerryCore
import Foundation

/// The outcome of one publish: the manifest fields of the version now current, plus timing and whether the data
/// was unchanged (then no new version was made and the fields describe the latest existing version).
///
/// `--json` prints it as one object with sorted keys:
/// `{"createdAt","dataset","gzipSize","schemaVersion","seconds","sha256","size","tables","unchanged","version","versions"}`;
/// for a template with `scope:`, `{"createdAt","dataset","schemaVersion","scopes","seconds","unchanged","version"}`.
///
/// ```swift
/// let result = try await Publisher(configuration: config, logger: logger).publish()
/// print(result.unchanged ? "unchanged at \(result.version)" : "published \(result.version)")
/// ```
public struct PublishResult: Codable, Sendable, Equatable {
    public var dataset: String
    /// The current version (the new one, or the latest existing one when ``unchanged``).
    public var version: Int
    /// SHA-256 hex of the version's SQLite file (nil for a scoped dataset: see ``scopes``).
    public var sha256: String?
    /// SQLite file size in bytes (nil for a scoped dataset).
    public var size: Int64?
    /// Gzip copy size in bytes (nil for a scoped dataset).
    public var gzipSize: Int64?
    /// When the version was made, ISO-8601 UTC with milliseconds.
    public var createdAt: String
    public var schemaVersion: Int
    /// Rows per table (nil for a scoped dataset).
    public var tables: [String: Int]?
    /// Retained versions after this publish, ascending (nil for a scoped dataset).
    public var versions: [Int]?
    /// For a template with `scope:`, one entry per scope value now served, sorted; nil otherwise.
    public var scopes: [Scope]?

    /// One scope's outcome in a scoped publish.
    public struct Scope: Codable, Sendable, Equatable {
        public var scope: String
        /// The scope's current version (new, or kept when ``unchanged``).
        public var version: Int
        public var sha256: String
        public var size: Int64
        public var tables: [String: Int]
        /// True when this scope's data equalled its current version's, so it kept that version.
        public var unchanged: Bool
        /// True when another scope of the same publish has identical content, so they share one stored file.
        public var shared: Bool

        public init(scope: String, version: Int, sha256: String, size: Int64, tables: [String: Int], unchanged: Bool, shared: Bool) {
            self.scope = scope
            self.version = version
            self.sha256 = sha256
            self.size = size
            self.tables = tables
            self.unchanged = unchanged
            self.shared = shared
        }
    }
    /// Wall-clock seconds the publish took.
    public var seconds: Double
    /// True when the exported data equalled the latest version's, so no version was made.
    public var unchanged: Bool

    public init(manifest: Manifest, seconds: Double, unchanged: Bool) {
        dataset = manifest.dataset
        version = manifest.version
        sha256 = manifest.sha256
        size = manifest.size
        gzipSize = manifest.gzipSize
        createdAt = manifest.createdAt
        schemaVersion = manifest.schemaVersion
        tables = manifest.tables
        versions = manifest.versions
        self.seconds = seconds
        self.unchanged = unchanged
    }

    /// The result of a scoped publish: `version` is the highest version any scope has, `createdAt` this publish's.
    public init(scoped manifest: ScopedManifest, scopes: [Scope], seconds: Double, unchanged: Bool) {
        dataset = manifest.dataset
        version = manifest.lastVersion
        createdAt = manifest.createdAt
        schemaVersion = manifest.schemaVersion
        self.scopes = scopes
        self.seconds = seconds
        self.unchanged = unchanged
    }

    /// One JSON object, sorted keys, no trailing newline.
    public func jsonData() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
    }

    /// The human summary `ferry publish` prints.
    public var summary: String {
        var lines: [String] = []
        if let scopes {
            let changed = scopes.filter { !$0.unchanged }.count
            lines.append(
                unchanged
                    ? "\(dataset): unchanged; \(scopes.count) scope(s), no new version was made"
                    : "\(dataset): published version \(version) for \(changed) of \(scopes.count) scope(s)")
            let files = Set(scopes.map(\.sha256)).count
            lines.append("  scopes     \(scopes.count) (\(files) distinct file(s))")
            for scope in scopes {
                let state = scope.unchanged ? "unchanged" : "new"
                let rows = scope.tables.keys.sorted().map { "\($0)=\(scope.tables[$0]!)" }.joined(separator: " ")
                lines.append("  scope \(scope.scope): version \(scope.version) (\(state)\(scope.shared ? ", shared file" : "")) sha256 \(scope.sha256.prefix(12))… \(scope.size) bytes, \(rows)")
            }
            lines.append("  seconds    " + String(format: "%.2f", seconds))
            return lines.joined(separator: "\n")
        }
        if unchanged {
            lines.append("\(dataset): unchanged since version \(version); no new version was made")
        } else {
            lines.append("\(dataset): published version \(version)")
        }
        lines.append("  dataset    \(dataset)")
        lines.append("  version    \(version)")
        lines.append("  sha256     \(sha256 ?? "")")
        lines.append("  size       \(size ?? 0) bytes")
        lines.append("  gzip size  \(gzipSize ?? 0) bytes")
        let tables = self.tables ?? [:]
        lines.append("  rows       " + tables.keys.sorted().map { "\($0)=\(tables[$0]!)" }.joined(separator: " "))
        lines.append("  versions   " + (versions ?? []).map(String.init).joined(separator: ", "))
        lines.append("  seconds    " + String(format: "%.2f", seconds))
        return lines.joined(separator: "\n")
    }
}
