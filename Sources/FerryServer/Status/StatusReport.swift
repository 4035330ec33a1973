import FerryCore
import FerryPostgres
import FerryStore
import Foundation

/// Everything the status page shows, as data: `GET /status.json` encodes it and `GET /status` renders it, so the
/// two always agree. Times are ISO-8601 UTC with milliseconds; sizes are bytes.
///
/// A scoped dataset is described as a whole, never per scope: its sizes and rows are sums over the scopes' current
/// snapshots, its retained versions are the dataset as of each version number (each scope's newest snapshot at or
/// before it), and the largest scope is described by its size only. No scope name or value appears.
struct StatusReport: Codable, Sendable, Equatable {
    var generatedAt: String
    var startedAt: String
    /// The store this server reads: its directory, or a bucket's `s3://BUCKET/PREFIX` (never a secret).
    var store: String
    var datasets: [Dataset]
    var traffic: Traffic
    var health: Health

    struct Dataset: Codable, Sendable, Equatable {
        var name: String
        var scoped: Bool
        /// For a schema line (`DATASET.vN`, docs/schema-lines.md): true once its template was dropped (410).
        var retired: Bool
        /// Distinct devices (`Ferry-Device` ids) that asked for this dataset in the last 24 h.
        var devices24h: Int
        var version: Int
        var createdAt: String
        /// Seconds between `createdAt` and `generatedAt`.
        var ageSeconds: Int
        var size: Int64
        var gzipSize: Int64
        /// Rows per table of the current snapshot (summed over scopes for a scoped dataset).
        var tables: [String: Int]
        var rows: Int
        /// Oldest first; the last one is current.
        var retained: [Version]
        /// Only for a scoped dataset.
        var scopes: Scopes?
        /// The history devices catch up from by one patch; nil without a patch horizon (docs/delta.md).
        var history: History?
        /// The attachments the dataset holds (its schema lines share them); nil when it holds none.
        var attachments: Attachments?
        /// The files this server made on request for the dataset, and the builds and merges under way.
        var builds: Builds?
    }

    /// What a server made on request (docs/delta.md, "What a server does per version"): the build cache's bytes
    /// and files for the dataset, how often a request found its file made (`hitRate`, nil before any request), and
    /// the whole-file builds and catch-up merges running and waiting on the build lane.
    struct Builds: Codable, Sendable, Equatable {
        var cacheBytes: Int64
        var cacheLimit: Int64
        var files: Int
        var hits: Int
        var misses: Int
        var hitRate: Double?
        var buildsRunning: Int
        var buildsWaiting: Int
        var mergesRunning: Int
        var mergesWaiting: Int
    }

    /// A dataset's attachments: how many the store holds, and their bytes.
    struct Attachments: Codable, Sendable, Equatable {
        var count: Int
        var bytes: Int64
    }

    /// What the patch horizon keeps: the oldest version a device catches up from, how many versions' steps lead
    /// from it to the current one (over every scope), and what those steps cost the store.
    struct History: Codable, Sendable, Equatable {
        var horizonSeconds: Int
        var oldestVersion: Int
        var steps: Int
        var bytes: Int64
        /// The history's points per tier, newest tier first (`every`, `5m`, `1h`, `1d`; docs/delta.md, "A bounded
        /// history"), over every scope.
        var tiers: [Tier] = []
    }

    /// One tier of the history: its name and how many versions it keeps.
    struct Tier: Codable, Sendable, Equatable {
        var name: String
        var points: Int
    }

    struct Version: Codable, Sendable, Equatable {
        var version: Int
        var createdAt: String
        var size: Int64
        var gzipSize: Int64
        var rows: Int
        /// The published patches that lead to this version, by the older version they start from (ascending), with
        /// their compressed size: what a device that holds `from` downloads instead of `gzipSize`. Empty for the
        /// first version, after a schema change, or when every patch would have been larger than the gzip copy. For
        /// a scoped dataset, each size is summed over the scopes that published this version with such a patch.
        var patches: [Patch]
    }

    struct Patch: Codable, Sendable, Equatable {
        var from: Int
        var size: Int64
    }

    struct Scopes: Codable, Sendable, Equatable {
        /// Scopes with a snapshot.
        var count: Int
        /// Distinct snapshot files behind every retained version of every scope (scopes with equal data share one).
        var distinctFiles: Int
        /// Distinct files among the scopes' current snapshots.
        var distinctCurrentFiles: Int
        /// The scope whose current snapshot is largest, described without its name.
        var largest: Largest
    }

    struct Largest: Codable, Sendable, Equatable {
        var version: Int
        var size: Int64
        var gzipSize: Int64
        var rows: Int
    }

    struct Traffic: Codable, Sendable, Equatable {
        var bucketSeconds: Int
        /// The last 60 minutes, oldest first; the last one is the minute in progress.
        var minutes: [Minute]
        /// Sums over `minutes`.
        var totals: Counts
    }

    struct Minute: Codable, Sendable, Equatable {
        var start: String
        var counts: Counts
    }

    struct Counts: Codable, Sendable, Equatable {
        var ok = 0
        var partial = 0
        var notModified = 0
        var clientError = 0
        var serverError = 0
        var other = 0
        var bytes: Int64 = 0
        var applied = 0
        var rejected = 0
        var gone = 0
        var invalid = 0
        var forbidden = 0

        var requests: Int { ok + partial + notModified + clientError + serverError + other }
        var uploads: Int { applied + rejected + gone + invalid + forbidden }
    }

    struct Health: Codable, Sendable, Equatable {
        /// When the catalog last finished reading the store; nil before its first poll.
        var lastPollAt: String?
        /// Datasets whose `manifest.json` could not be read (the previous state keeps being served).
        var unreadableManifests: [String]
        /// Every dataset the store, the publishes or the configuration name, sorted.
        var datasets: [DatasetHealth]
    }

    struct DatasetHealth: Codable, Sendable, Equatable {
        var name: String
        /// Whether this server merges the dataset's uploads (`--config` with writable tables).
        var merger: Bool
        /// Whether this server checks tokens of the scoped dataset (`--config` with `scope:`).
        var tokenCheck: Bool
        /// The merger's PostgreSQL connection; nil without a merger.
        var mergerConnection: Connection?
        /// The token check's PostgreSQL connection; nil without a token check (or with one that is not PostgreSQL's).
        var tokenCheckConnection: Connection?
        var lastPublish: Publish?
        var lastUpload: Upload?
    }

    /// What a merger's or token check's connections last saw of PostgreSQL: recorded on every connect and every
    /// query they make (no query is made for the status page), never the database URL or its password.
    struct Connection: Codable, Sendable, Equatable {
        /// `connected` (PostgreSQL answered last), `failing` (the last connect failed or a connection was lost) or
        /// `unknown` (nothing tried yet).
        var state: String
        var lastSuccessAt: String?
        var lastFailureAt: String?
        /// Why the last failure happened (at most 300 characters).
        var lastError: String?

        init(_ health: PostgresPool.Health) {
            switch health.connected {
            case true?: state = "connected"
            case false?: state = "failing"
            case nil: state = "unknown"
            }
            lastSuccessAt = health.lastSuccess.map(Timestamp.format)
            lastFailureAt = health.lastFailure.map(Timestamp.format)
            lastError = health.lastError
        }
    }

    struct Publish: Codable, Sendable, Equatable {
        var at: String
        /// `published`, `unchanged` or `failed`.
        var outcome: String
        var version: Int?
        var message: String?
    }

    struct Upload: Codable, Sendable, Equatable {
        var at: String
        /// False when PostgreSQL could not be reached or failed (the client got a 503).
        var succeeded: Bool
    }

    /// Sorted keys, no escaped slashes: stable bytes.
    func jsonData() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes, .prettyPrinted]
        return try encoder.encode(self)
    }
}

extension StatusReport {
    /// Builds the report from the catalog's state, the board, the datasets with a token check (each with its
    /// connection state, nil when the check keeps none) and the attachments each dataset holds (by base name).
    static func make(
        catalog: CatalogStatus, board: StatusBoard, tokenChecks: [String: PostgresPool.Health?], store: String,
        attachments: [String: (count: Int, bytes: Int64)] = [:], now: Date = Date()
    ) -> StatusReport {
        let boardState = board.current
        let held = attachments
        let datasets = catalog.datasets.compactMap { entry -> Dataset? in
            guard var dataset = dataset(from: entry, now: now) else { return nil }
            if let (count, bytes) = held[DatasetName.base(of: entry.name) ?? entry.name], count > 0 {
                dataset.attachments = Attachments(count: count, bytes: bytes)
            }
            return dataset
        }
        var names = Set(datasets.map(\.name)).union(tokenChecks.keys).union(boardState.mergers).union(
            boardState.publishes.keys)
        names.formUnion(catalog.unreadableManifests)
        let health = names.sorted().map { name in
            DatasetHealth(
                name: name, merger: boardState.mergers.contains(name), tokenCheck: tokenChecks[name] != nil,
                mergerConnection: boardState.mergerHealth[name].map { Connection($0()) },
                tokenCheckConnection: (tokenChecks[name] ?? nil).map(Connection.init),
                lastPublish: boardState.publishes[name].map(publish(from:)),
                lastUpload: boardState.uploads[name].map {
                    Upload(at: Timestamp.format($0.at), succeeded: $0.succeeded)
                })
        }
        return StatusReport(
            generatedAt: Timestamp.format(now), startedAt: Timestamp.format(board.startedAt), store: store,
            datasets: datasets,
            traffic: traffic(board.traffic.window(endingAt: now)),
            health: Health(
                lastPollAt: catalog.lastPoll.map(Timestamp.format), unreadableManifests: catalog.unreadableManifests,
                datasets: health))
    }

    static func dataset(from dataset: CatalogStatus.Dataset, now: Date) -> Dataset? {
        let currents = dataset.views.map(\.manifest)
        guard let newest = currents.max(by: { ($0.version, $0.createdAt) < ($1.version, $1.createdAt) }) else {
            return nil
        }
        var tables: [String: Int] = [:]
        for manifest in currents {
            tables.merge(manifest.tables, uniquingKeysWith: +)
        }
        let ageSeconds = Timestamp.parse(newest.createdAt).map { max(0, Int(now.timeIntervalSince($0))) } ?? 0
        var scopes: Scopes?
        if dataset.scoped, let largest = currents.max(by: { ($0.size, $0.version) < ($1.size, $1.version) }) {
            scopes = Scopes(
                count: currents.count,
                distinctFiles: Set(dataset.views.flatMap { $0.retained.map(\.sha256) }).count,
                distinctCurrentFiles: Set(currents.map(\.sha256)).count,
                largest: Largest(
                    version: largest.version, size: largest.size, gzipSize: largest.gzipSize, rows: rows(largest.tables)
                ))
        }
        return Dataset(
            name: dataset.name, scoped: dataset.scoped, retired: dataset.retired, devices24h: dataset.devices,
            version: newest.version, createdAt: newest.createdAt,
            ageSeconds: ageSeconds,
            size: currents.reduce(0) { $0 + $1.size }, gzipSize: currents.reduce(0) { $0 + $1.gzipSize },
            tables: tables,
            rows: rows(tables), retained: retained(dataset.views), scopes: scopes, history: dataset.history,
            builds: dataset.builds)
    }

    /// The dataset as of each retained version number: per view, its newest record at or before that number.
    /// For a public dataset (one view) that is simply its retained versions.
    static func retained(_ views: [CatalogStatus.View]) -> [Version] {
        let numbers = Set(views.flatMap { $0.retained.map(\.version) }).sorted()
        return numbers.map { number in
            var version = Version(version: number, createdAt: "", size: 0, gzipSize: 0, rows: 0, patches: [])
            var patches: [Int: Int64] = [:]
            for view in views {
                guard let record = view.retained.last(where: { $0.version <= number }) else { continue }
                version.size += record.size
                version.gzipSize += record.gzipSize
                version.rows += rows(record.tables)
                guard record.version == number else { continue }
                if record.createdAt > version.createdAt { version.createdAt = record.createdAt }
                for patch in record.patches ?? [] { patches[patch.from, default: 0] += patch.size }
            }
            version.patches = patches.keys.sorted().map { Patch(from: $0, size: patches[$0]!) }
            return version
        }
    }

    static func rows(_ tables: [String: Int]) -> Int { tables.values.reduce(0, +) }

    static func publish(from record: StatusBoard.PublishRecord) -> Publish {
        let at = Timestamp.format(record.at)
        switch record.outcome {
        case .published(let version): return Publish(at: at, outcome: "published", version: version)
        case .unchanged(let version): return Publish(at: at, outcome: "unchanged", version: version)
        case .failed(let message): return Publish(at: at, outcome: "failed", message: message)
        }
    }

    static func traffic(_ buckets: [TrafficRecorder.Bucket]) -> Traffic {
        var totals = Counts()
        let minutes = buckets.map { bucket in
            totals.add(bucket.counts)
            return Minute(start: Timestamp.format(unixMillis: bucket.minute * 60_000), counts: bucket.counts)
        }
        return Traffic(bucketSeconds: 60, minutes: minutes, totals: totals)
    }
}

extension StatusReport.Counts {
    mutating func add(_ other: Self) {
        ok += other.ok
        partial += other.partial
        notModified += other.notModified
        clientError += other.clientError
        serverError += other.serverError
        self.other += other.other
        bytes += other.bytes
        applied += other.applied
        rejected += other.rejected
        gone += other.gone
        invalid += other.invalid
        forbidden += other.forbidden
    }
}
