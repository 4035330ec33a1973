import FerryCore
import Foundation

/// The outcome of one publish: the manifest fields of the version now current, plus timing and whether the data
/// was unchanged (then no new version was made and the fields describe the latest existing version).
///
/// `--json` prints it as one object with sorted keys:
/// `{"createdAt","dataset","gzipSize","schemaVersion","seconds","sha256","size","tables","unchanged","version","versions"}`.
///
/// ```swift
/// let result = try await Publisher(configuration: config, logger: logger).publish()
/// print(result.unchanged ? "unchanged at \(result.version)" : "published \(result.version)")
/// ```
public struct PublishResult: Codable, Sendable, Equatable {
    public var dataset: String
    /// The current version (the new one, or the latest existing one when ``unchanged``).
    public var version: Int
    /// SHA-256 hex of the version's SQLite file.
    public var sha256: String
    /// SQLite file size in bytes.
    public var size: Int64
    /// Gzip copy size in bytes.
    public var gzipSize: Int64
    /// When the version was made, ISO-8601 UTC with milliseconds.
    public var createdAt: String
    public var schemaVersion: Int
    /// Rows per table.
    public var tables: [String: Int]
    /// Retained versions after this publish, ascending.
    public var versions: [Int]
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

    /// One JSON object, sorted keys, no trailing newline.
    public func jsonData() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
    }

    /// The human summary `ferry publish` prints.
    public var summary: String {
        var lines: [String] = []
        if unchanged {
            lines.append("\(dataset): unchanged since version \(version); no new version was made")
        } else {
            lines.append("\(dataset): published version \(version)")
        }
        lines.append("  dataset    \(dataset)")
        lines.append("  version    \(version)")
        lines.append("  sha256     \(sha256)")
        lines.append("  size       \(size) bytes")
        lines.append("  gzip size  \(gzipSize) bytes")
        lines.append("  rows       " + tables.keys.sorted().map { "\($0)=\(tables[$0]!)" }.joined(separator: " "))
        lines.append("  versions   " + versions.map(String.init).joined(separator: ", "))
        lines.append("  seconds    " + String(format: "%.2f", seconds))
        return lines.joined(separator: "\n")
    }
}
