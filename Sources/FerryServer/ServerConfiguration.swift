import FerryCore
import FerryMerge
import FerryStore
import Foundation
import Prometheus

/// Everything `ferry serve` and the tests need to start a server over a snapshot store.
///
/// Defaults: host `127.0.0.1`, port 8080, poll interval 0.5 s, drain timeout 30 s, a fresh metrics registry, no
/// database (the read path only), plain HTTP (no TLS), idle timeout 60 s, header timeout 10 s, request heads up
/// to 80 KiB. Port 0 asks the kernel for a free port (tests use it).
///
/// ```swift
/// var configuration = ServerConfiguration(storePath: URL(fileURLWithPath: "snapshots"))
/// configuration.port = 0
/// let app = try await buildApplication(configuration, logger: Logger(label: "ferry"))
/// ```
public struct ServerConfiguration: Sendable {
    /// The snapshot store directory (the publisher's `--store`).
    public var storePath: URL
    /// Address to bind. Default `127.0.0.1`.
    public var host: String
    /// Port to bind; 0 picks a free port. Default 8080.
    public var port: Int
    /// How often the catalog checks every `manifest.json` for a new version. At most 1 s (the bound);
    /// larger values are clamped to 1 s. Default 0.5 s.
    public var pollInterval: Duration
    /// How long SIGTERM waits for in-flight downloads before the process exits anyway. Default 30 s.
    public var drainTimeout: Duration
    /// Where the server's metrics are registered and what `GET /metrics` renders. The library never bootstraps
    /// the global `MetricsSystem`; `ferry serve` does, with this same registry.
    public var metricsRegistry: PrometheusCollectorRegistry
    /// Size of each read from a snapshot file while streaming a body. Default 1 MiB.
    public var chunkSize: Int
    /// The most memory all downloads together hold in file chunks (a multiple of ``chunkSize``, at least two
    /// chunks): the server's memory does not grow with the number of concurrent downloads; beyond it, downloads
    /// take turns. Default 64 MiB.
    public var downloadBufferBytes: Int = 64 << 20
    /// How long a token's scope (or its refusal) is cached: a revoke or a grant takes effect within this. Default 5 s.
    public var tokenCacheTTL: Duration = .seconds(5)
    /// The templates and PostgreSQL database behind the changes endpoint (`POST /v1/datasets/{dataset}/changes`)
    /// and the token checks of scoped datasets. ``buildApplication(_:logger:onServerRunning:)`` starts a merger per
    /// template, a token check per template with `scope:`, and the ``RetentionService``. Nil serves the read path
    /// only: no changes endpoint, and a scoped dataset answers 503.
    public var database: DatabaseSettings?
    /// Size and count limits of an uploaded change batch. Default ``ChangeRequest/Limits/init()``.
    public var changeLimits = ChangeRequest.Limits()
    /// How long a keep-alive connection with no request in flight stays open. Nil keeps idle connections open
    /// forever. Default 60 s.
    public var idleTimeout: Duration? = .seconds(60)
    /// How long a client may take to send a request's head (request line and headers) from its first byte; a
    /// slower client (slowloris) is disconnected. Nil turns the check off. Default 10 s.
    public var headerTimeout: Duration? = .seconds(10)
    /// Largest request head (request line and headers) in bytes; a larger one is answered 400 and the
    /// connection closed. Default 80 KiB.
    public var maxHeaderBytes = 80 * 1024
    /// Certificate and key for HTTPS; nil (default) serves plain HTTP. See ``TLSSettings``.
    public var tls: TLSSettings? = nil
    /// The operator's token for `GET /status` and `/status.json`; nil (default) turns both off (404). Never logged.
    public var statusToken: String? = nil
    /// The largest attachment accepted, in bytes (`ferry serve --max-attachment-bytes`); a larger upload is
    /// answered 413. Default 64 MiB.
    public var maxAttachmentBytes: Int64 = 64 << 20
    /// How long an attachment that no retained version names is kept after its upload (`--attachment-grace`), so a
    /// device can upload a photo and then the edit that names it. Default 7 days.
    public var attachmentGrace: Duration = .seconds(7 * 86_400)
    /// How long a partial upload (tus) is kept since it was created; then it is deleted and a `HEAD` of it is 404.
    /// Default 1 day.
    public var partialUploadExpiry: Duration = .seconds(86_400)
    /// Files made on request: where (`--cache-dir`), how many bytes (`--cache-size`), how many at once.
    public var builds = BuildSettings()
    /// What a whole server's assembly injects beside the settings (``ServerDependencies``).
    package var dependencies = ServerDependencies()
    /// Tests only: whether conditional requests may be answered in the channel (``RawNotModifiedHandler``, the
    /// default) or all go to the router, and a callback for each answer given in the channel.
    var channelRevalidation = ChannelRevalidation()

    struct ChannelRevalidation: Sendable {
        var enabled = true
        /// Whether plain `GET`s of whole snapshot and version files are sent from the channel with `sendfile` (plain
        /// HTTP only). Tests turn it off to compare with the route's chunks.
        var sendsFiles = true
        /// Called with true when the answer was a remembered one (``RevalidationMemo``).
        var onAnswer: (@Sendable (_ remembered: Bool) -> Void)?
        /// Called after each file sent from the channel, with its bytes (nil when the write failed).
        var onDownload: (@Sendable (_ bytes: Int64?) -> Void)?
    }

    /// The database side of a server.
    ///
    /// ```swift
    /// configuration.database = .init(templatePaths: [URL(fileURLWithPath: "templates/trips.yml")],
    ///                                databaseURL: "postgres://ferry@db/app")
    /// ```
    public struct DatabaseSettings: Sendable, CustomStringConvertible {
        /// Template files, one per dataset.
        public var templatePaths: [URL]
        /// PostgreSQL URL. Never logged as is: ``description`` redacts the password.
        public var databaseURL: String
        /// How long the answer to an uploaded change is kept in `ferry_changes` (a device resending the change
        /// within this gets the same answer, exactly once). Default 30 days.
        public var changeRetention: Duration = .seconds(30 * 86_400)
        /// How often stored answers older than ``changeRetention`` are deleted. Default 1 hour.
        public var retentionSweepInterval: Duration = .seconds(3_600)
        /// PostgreSQL connections per dataset's merger. Default 2.
        public var mergerConnections: Int = 2
        /// How long a device unseen is kept in the fleet (`ferry_devices`). Default 90 days (`--device-retention`).
        public var deviceRetention: Duration = .seconds(90 * 86_400)
        /// At most this many devices per dataset in the fleet; past it the least recently seen are forgotten.
        public var deviceLimit: Int = 100_000
        /// How often the devices seen are written to the fleet. Default 5 s.
        public var fleetFlushInterval: Duration = .seconds(5)
        /// How JWT bearer tokens are verified, for templates whose `scope:` names a `claim:` (issue 51); nil: no
        /// template may name one.
        public var jwt: JWTSettings? = nil

        public init(templatePaths: [URL], databaseURL: String) {
            self.templatePaths = templatePaths
            self.databaseURL = databaseURL
        }

        public var description: String {
            "DatabaseSettings(templates: \(templatePaths.map(\.path)), database: \(redactURL(databaseURL)))"
        }
    }

    public init(
        storePath: URL, host: String = "127.0.0.1", port: Int = 8080, pollInterval: Duration = .milliseconds(500),
        drainTimeout: Duration = .seconds(30),
        metricsRegistry: PrometheusCollectorRegistry = PrometheusCollectorRegistry(),
        chunkSize: Int = 1 << 20, database: DatabaseSettings? = nil
    ) {
        self.storePath = storePath
        self.host = host
        self.port = port
        self.pollInterval = pollInterval
        self.drainTimeout = drainTimeout
        self.metricsRegistry = metricsRegistry
        self.chunkSize = chunkSize
        self.database = database
    }

    /// The injected attachment store, or the directory store's.
    var effectiveAttachmentStore: any AttachmentStore {
        dependencies.attachmentStore ?? FileAttachmentStore(root: storePath)
    }

    /// The injected uploads directory, or `STORE/.ferry-uploads/`.
    var effectiveAttachmentUploads: URL {
        dependencies.attachmentUploads ?? storePath.appendingPathComponent(".ferry-uploads", isDirectory: true)
    }

    /// The poll interval actually used: clamped to 10 ms ... 1 s.
    var effectivePollInterval: Duration {
        min(max(pollInterval, .milliseconds(10)), .seconds(1))
    }
}

/// What a whole server's assembly (FerryService's `ServerAssembly`: a bucket's replica, in-process publish
/// schedules) injects into the HTTP layer beside the settings of ``ServerConfiguration``: the store it reads, how it
/// is named and reached, who tells it about changes, and the board it reports to. Package-wide, not public: an
/// embedder sets settings only, and a test of the HTTP layer injects as the assembly does.
package struct ServerDependencies: Sendable {
    /// A store to read instead of the directory at ``ServerConfiguration/storePath`` (e.g. a bucket's replica, `FerryBucket`), which
    /// the caller keeps up to date; ``storeName`` then names it in logs. Nil (default): the directory.
    package var store: (any SnapshotStore)? = nil
    /// How logs name the store (a bucket's `s3://BUCKET/PREFIX`, never a secret); nil: ``ServerConfiguration/storePath``.
    package var storeName: String? = nil
    /// Where a cache may fetch an object's bytes itself: given the dataset and the object's name (`objects/{name}`),
    /// a URL (a bucket's presigned URL, `ferry serve --presign-objects`) that the object lookup sends in
    /// `Ferry-Object-URL`, so nginx fills its cache from the bucket instead of from a replica
    /// (deploy/nginx/ferry.conf). Nil (default): the lookup names no URL, and caches fill from the replicas.
    package var objectURL: (@Sendable (_ dataset: String, _ object: String) -> String)? = nil
    /// Lets a publisher in the same process say that the store changed, so the catalog reads it at once rather than
    /// at its next poll (``StoreChanges``). Nil (default): the poll alone finds changes.
    package var storeChanges: StoreChanges? = nil
    /// What the status page counts and shows beyond the store (traffic, in-process publishes). A fresh board by
    /// default; a caller that publishes in-process keeps a reference and reports to it.
    package var statusBoard = StatusBoard()
    /// Where attachments live (`/v1/datasets/{dataset}/attachments/…`). Nil (default): the directory store's
    /// ``FileAttachmentStore`` under ``ServerConfiguration/storePath`` (`STORE/DATASET/attachments/`); a bucket store gives its own.
    package var attachmentStore: (any AttachmentStore)? = nil
    /// Where partial uploads (tus) and whole uploads being received are kept until they are verified: a
    /// server-local directory on the same file system as the store, so a verified upload is renamed into place. Nil
    /// (default): `STORE/.ferry-uploads/` (a bucket store gives its cache directory).
    package var attachmentUploads: URL? = nil

    package init() {}
}
