import FerryCore

/// A step of a publish whose time ``PublishPhases`` reports.
public enum PublishPhase: String, CaseIterable, Sendable, CodingKey {
    /// Binary COPY from PostgreSQL decoded into SQLite INSERTs, every table; for a version built from the previous
    /// one, decoded, compared with its row index and the differences written.
    case extract
    /// A partitioned dataset's partitions read and hashed in one pass to find the changed ones (``PartitionProbe``).
    case probe
    /// The previous version's file copied for an incremental build (part of `extract`, which waits for it).
    case clone
    /// The template's `CREATE INDEX` statements.
    case indexes
    /// Metadata tables and the SQLite COMMIT.
    case commit
    /// SQLite `ANALYZE`.
    case analyze
    /// `PRAGMA quick_check` of the finished file (why not `integrity_check`: ``SnapshotExporter``).
    case quickCheck
    /// Per-table row counts checked against what PostgreSQL sent.
    case rowCounts
    /// The version's ``ContentDigest`` (a scan of every published row).
    case contentDigest
    /// The stored object: fsync, SHA-256, gzip copy, renames.
    case store
    /// Row-level patches from the retained versions.
    case patches
    /// The manifest written atomically, unreferenced objects removed.
    case manifest
}

/// Seconds spent in each ``PublishPhase`` of one publish, for finding where the time goes (`ferry publish --json`
/// prints them as `phases`). With several scopes a phase's time is summed over the scopes; phases that run side
/// by side overlap, so the sum may exceed the publish's wall-clock `seconds`. A phase that did not run is absent.
///
/// ```swift
/// let result = try await publisher.publish()
/// print(result.phases[.extract] ?? 0)
/// ```
public struct PublishPhases: Encodable, Sendable, Equatable {
    private var seconds: [PublishPhase: Double] = [:]

    public init() {}

    /// Seconds spent in `phase`, nil if it did not run.
    public subscript(phase: PublishPhase) -> Double? { seconds[phase] }

    /// Adds `value` seconds to `phase`.
    mutating func add(_ phase: PublishPhase, _ value: Double) {
        seconds[phase, default: 0] += value
    }

    /// Adds every phase of `other`.
    mutating func add(_ other: PublishPhases) {
        for (phase, value) in other.seconds { add(phase, value) }
    }

    /// Runs `body` and adds its wall-clock time to `phase` (also when it throws).
    mutating func time<T>(_ phase: PublishPhase, _ body: () throws -> T) rethrows -> T {
        let start = ContinuousClock.now
        defer { add(phase, (ContinuousClock.now - start).inSeconds) }
        return try body()
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: PublishPhase.self)
        for phase in PublishPhase.allCases {
            if let value = seconds[phase] { try container.encode(value, forKey: phase) }
        }
    }
}
