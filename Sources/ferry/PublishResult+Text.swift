import FerryBucket
import FerryCore
import FerryPublisher
import Foundation

extension PublishResult {
    /// The human summary `ferry publish` prints.
    var text: String {
        if let lineResults = self.lines {
            var text = lineResults.map(\.text).joined(separator: "\n")
            if let retiredLines, !retiredLines.isEmpty {
                let base = DatasetName.base(of: dataset) ?? dataset
                text +=
                    "\n\(base): retired line(s) \(retiredLines.map { "v\($0)" }.joined(separator: ", ")) (no template given): "
                    + "their devices get 410 and are told to update the app"
            }
            return text
        }
        var lines: [String] = []
        if let scopes, partitioned {
            lines += partitionLines(scopes)
        } else if let scopes {
            let changed = scopes.filter { !$0.unchanged }.count
            lines.append(
                unchanged
                    ? "\(dataset): unchanged; \(scopes.count) scope(s), no new version was made"
                    : "\(dataset): published version \(version) for \(changed) of \(scopes.count) scope(s)")
            lines.append("  scopes     \(scopes.count) (\(Set(scopes.map(\.sha256)).count) distinct file(s))")
            for scope in scopes {
                let state = scope.unchanged ? "unchanged" : "new"
                lines.append(
                    "  scope \(scope.scope): version \(scope.version) (\(state)\(scope.shared ? ", shared file" : "")) sha256 \(scope.sha256.prefix(12))… \(scope.size) bytes, \(Self.rows(scope.tables))"
                )
            }
        } else if let manifest {
            lines.append(
                unchanged
                    ? "\(dataset): unchanged since version \(version); no new version was made"
                    : "\(dataset): published version \(version)")
            lines.append("  dataset    \(dataset)")
            lines.append("  version    \(manifest.version)")
            lines.append("  sha256     \(manifest.sha256)")
            lines.append("  size       \(manifest.size) bytes")
            if manifest.gzipSize > 0 {
                lines.append("  gzip size  \(manifest.gzipSize) bytes")
            } else if let step = manifest.current.patch(from: manifest.version - 1) {
                // A version stored as a step has no gzip copy in the store (docs/delta.md)
                lines.append("  stored     as its step, the patch from version \(step.from): \(step.size) bytes")
            }
            lines.append("  rows       " + Self.rows(manifest.tables))
            lines.append("  versions   " + manifest.versions.map(String.init).joined(separator: ", "))
        }
        if let incremental {
            lines.append(
                "  built      from the current version: \(incremental.unchanged) rows kept, \(incremental.updated) rewritten, "
                    + "\(incremental.inserted) inserted, \(incremental.deleted) deleted")
        }
        if !keptTables.isEmpty {
            lines.append(
                "  not read   " + keptTables.joined(separator: ", ")
                    + " (no changed table in their queries; rows kept from the current version)")
        }
        if let bucket {  // FerryBucket's `PublishResult.bucket`: the report of a publish into a bucket
            lines.append(
                "  bucket     \(bucket.uploaded) object(s) uploaded (\(bucket.uploadedBytes) bytes), \(bucket.skipped) already "
                    + "there, \(bucket.deleted) deleted, \(bucket.abortedUploads) stale upload(s) aborted")
            if bucket.downloaded > 0 {
                lines.append(
                    "  cache      \(bucket.downloaded) file(s) downloaded from the bucket (\(bucket.downloadedBytes) bytes)"
                )
            }
            for note in bucket.notes { lines.append("  note       " + note) }
        }
        lines.append("  seconds    " + String(format: "%.2f", seconds))
        return lines.joined(separator: "\n")
    }

    /// `a=1 b=2`, by table name.
    static func rows(_ tables: [String: Int]) -> String {
        tables.keys.sorted().map { "\($0)=\(tables[$0]!)" }.joined(separator: " ")
    }
}

extension PublishResult {
    /// The streams of a partitioned dataset: a count, then the shared stream and the partitions that took this
    /// version (at most 20 named; a publish of 1,000 partitions is not 1,000 lines).
    func partitionLines(_ streams: [Scope]) -> [String] {
        let changed = streams.filter { !$0.unchanged }
        var lines = [
            unchanged
                ? "\(dataset): unchanged; \(streams.count - 1) partition(s) and the shared tables, no new version was made"
                : "\(dataset): published version \(version) for \(changed.count) of \(streams.count) stream(s) (\(streams.count - 1) partition(s) and the shared tables)"
        ]
        for stream in changed.prefix(20) {
            let name = stream.scope == PartitionLayout.sharedStream ? "shared tables" : "partition \(stream.scope)"
            lines.append(
                "  \(name): version \(stream.version) sha256 \(stream.sha256.prefix(12))… \(stream.size) bytes, \(Self.rows(stream.tables))"
            )
        }
        if changed.count > 20 { lines.append("  … and \(changed.count - 20) more") }
        if let retiredPartitions, !retiredPartitions.isEmpty {
            lines.append(
                "  retired    \(retiredPartitions.count) partition(s) (410 on the server): "
                    + retiredPartitions.prefix(10).joined(separator: ", ") + (retiredPartitions.count > 10 ? ", …" : "")
            )
        }
        return lines
    }
}
