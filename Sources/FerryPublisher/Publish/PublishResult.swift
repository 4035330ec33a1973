import FerryCore
import FerryStore
import Foundation

/// The outcome of one publish: the manifest now served (one per scope for a template with `scope:`), plus timing
/// and whether the data was unchanged (then no new version was made and the manifests describe the latest
/// existing versions).
///
/// `--json` prints it as one object with sorted keys: for an unscoped dataset the served ``Manifest``'s fields plus
/// `seconds`, `unchanged` and `phases`:
/// `{"contentDigest","createdAt","dataset","gzipSize","phases","schemaVersion","seconds","sha256","size","tables","unchanged","version","versions"}`;
/// for a scoped one `{"createdAt","dataset","phases","schemaVersion","scopes","seconds","unchanged","version"}`, each
/// scope its manifest's fields plus `scope`, `unchanged` and `shared`. `phases` maps each ``PublishPhase`` that ran
/// to its seconds. `incremental` (`{"unchanged","updated","inserted","deleted"}` rows) is present when a scope's data
/// was compared with its current version row by row.
///
/// ```swift
/// let result = try await Publisher(configuration: config, logger: logger).publish()
/// print(result.unchanged ? "unchanged at \(result.version)" : "published \(result.version)")
/// ```
@dynamicMemberLookup
public struct PublishResult: Encodable, Sendable, Equatable {
    public var dataset: String
    /// The highest version number the dataset has given (the new one, or the latest existing one when ``unchanged``).
    public var version: Int
    /// When the current version (the latest of any scope) was made, ISO-8601 UTC with milliseconds.
    public var createdAt: String
    public var schemaVersion: Int
    /// For an unscoped dataset, the manifest its clients now get; nil for a scoped dataset (see ``scopes``).
    public var manifest: Manifest?
    /// For a template with `scope:`, one entry per scope value now served, sorted; nil otherwise.
    public var scopes: [Scope]?
    /// True for a partitioned dataset (docs/partitions.md): ``scopes`` are its streams, the shared one's `scope` the
    /// empty string and each partition's its key. `--json` prints `"partitioned": true` then.
    public var partitioned = false
    /// The partitions retired by this publish and before (410 on the server), sorted; nil when none.
    public var retiredPartitions: [String]?
    /// Wall-clock seconds the publish took.
    public var seconds: Double
    /// True when no scope's data changed and no scope appeared or disappeared, so no version was made.
    public var unchanged: Bool
    /// Seconds per step of the publish (``PublishPhases``).
    public var phases: PublishPhases
    /// When at least one scope was compared with its current version row by row (``IncrementalCounts``, summed over
    /// those scopes): the rows kept, rewritten, inserted and deleted. Nil when every file was built from scratch.
    public var incremental: IncrementalCounts?
    /// Tables a publish on change kept from the current version without reading them
    /// (``Publisher/publish(changedTables:)``);
    /// not part of `publish --json`.
    public var keptTables: [String] = []
    /// What the publisher adds to the result, printed by `publish --json` under the report's ``PublishReport/key``:
    /// for a publish into a bucket, FerryBucket's `BucketTransfer` (key `bucket`); nil for a store directory.
    public var report: (any PublishReport)? {
        get { reportBox?.report }
        set { reportBox = newValue.map(PublishReportBox.init) }
    }
    /// ``report``, stored so that the result stays `Equatable`.
    private var reportBox: PublishReportBox?
    /// For a dataset published in schema lines (docs/schema-lines.md), each line's own result, by schema version
    /// ascending (key `lines`); the fields above are then the newest line's, except ``unchanged`` (true when no line
    /// changed) and ``seconds`` (the whole publish). Nil for a dataset published from one template.
    public var lines: [PublishResult]?
    /// The schema versions of the lines in the store whose template was not given: retired (key `retiredLines`).
    public var retiredLines: [Int]?

    /// One scope's outcome in a scoped publish: the manifest its token holders now get.
    @dynamicMemberLookup
    public struct Scope: Encodable, Sendable, Equatable {
        public var scope: String
        public var manifest: Manifest
        /// True when this scope's data equalled its current version's, so it kept that version.
        public var unchanged: Bool
        /// True when another scope of the same publish has identical content, so they share one stored file.
        public var shared: Bool

        public init(scope: String, manifest: Manifest, unchanged: Bool, shared: Bool) {
            self.scope = scope
            self.manifest = manifest
            self.unchanged = unchanged
            self.shared = shared
        }

        /// `scope.version`, `scope.sha256`, …: the scope's current version.
        public subscript<T>(dynamicMember keyPath: KeyPath<PublishedVersion, T>) -> T {
            manifest.current[keyPath: keyPath]
        }

        private enum CodingKeys: String, CodingKey { case scope, unchanged, shared }

        public func encode(to encoder: any Encoder) throws {
            try manifest.encode(to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(scope, forKey: .scope)
            try container.encode(unchanged, forKey: .unchanged)
            try container.encode(shared, forKey: .shared)
        }
    }

    /// The result of publishing `stored`: its implicit scope's manifest, or one ``Scope`` per scope.
    init(
        stored: StoredManifest, unchangedScopes: Set<String?>, unchanged: Bool, seconds: Double, phases: PublishPhases,
        incremental: IncrementalCounts? = nil
    ) {
        dataset = stored.dataset
        self.phases = phases
        self.incremental = incremental
        version = stored.lastVersion
        schemaVersion = stored.schemaVersion
        createdAt = stored.scopes.map(\.current.createdAt).max() ?? stored.createdAt
        self.seconds = seconds
        self.unchanged = unchanged
        partitioned = stored.partitioning != nil
        retiredPartitions = stored.retiredPartitions
        if stored.scoped {
            let sharing = Dictionary(grouping: stored.scopes, by: \.current.sha256)
            scopes = stored.scopes.map { entry in
                Scope(
                    scope: entry.scope ?? "", manifest: entry.manifest(dataset: stored.dataset),
                    unchanged: unchangedScopes.contains(entry.scope),
                    shared: (sharing[entry.current.sha256]?.count ?? 0) > 1)
            }
        } else {
            manifest = stored.entry(for: nil)?.manifest(dataset: stored.dataset)
        }
    }

    /// `result.sha256`, `result.tables`, …: the unscoped dataset's current version; nil for a scoped dataset.
    public subscript<T>(dynamicMember keyPath: KeyPath<PublishedVersion, T>) -> T? {
        manifest?.current[keyPath: keyPath]
    }

    /// Retained versions after this publish, ascending; nil for a scoped dataset.
    public var versions: [Int]? { manifest?.versions }

    private enum CodingKeys: String, CodingKey {
        case dataset, version, createdAt, schemaVersion, scopes, seconds, unchanged, phases, incremental, lines,
            retiredLines, partitioned, retiredPartitions
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        if let manifest {
            try manifest.encode(to: encoder)
        } else {
            try container.encode(dataset, forKey: .dataset)
            try container.encode(version, forKey: .version)
            try container.encode(createdAt, forKey: .createdAt)
            try container.encode(schemaVersion, forKey: .schemaVersion)
            try container.encode(scopes ?? [], forKey: .scopes)
            if partitioned {
                try container.encode(true, forKey: .partitioned)
                try container.encodeIfPresent(retiredPartitions, forKey: .retiredPartitions)
            }
        }
        try container.encode(seconds, forKey: .seconds)
        try container.encode(unchanged, forKey: .unchanged)
        try container.encode(phases, forKey: .phases)
        try container.encodeIfPresent(incremental, forKey: .incremental)
        if let report {
            var extra = encoder.container(keyedBy: PublishReportKey.self)
            try extra.encode(report, forKey: PublishReportKey(stringValue: type(of: report).key))
        }
        try container.encodeIfPresent(lines, forKey: .lines)
        try container.encodeIfPresent(retiredLines, forKey: .retiredLines)
    }
}
