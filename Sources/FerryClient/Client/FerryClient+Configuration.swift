import FerryCore
import Foundation

extension FerryClient {
    /// Runs on the pending snapshot, opened read-write inside one transaction, just before it becomes
    /// `database.db` in the same swap. `live` is the current `database.db` (read-only), nil on a first apply.
    /// The outbox uses it to re-apply local edits on top of fresh server data. It must be idempotent: a crash after
    /// it committed but before the rename runs it again on the same file at the next apply.
    public typealias PrepareUpdate = @Sendable (_ updated: SQLiteConnection, _ live: SQLiteConnection?) throws -> Void

    /// Supplies the access token for a scoped dataset, sent as `Authorization: Bearer <token>` with every snapshot
    /// request and every change upload. It is asked before each request, so a refreshed token is used at once; nil
    /// (or an empty string) sends no header. What it throws is passed on unchanged.
    public typealias TokenProvider = @Sendable () async throws -> String?

    /// How a ``FerryClient`` works. Only `directory` is required; fetching also needs `serverURL` and `dataset`. The
    /// settings of each part sit in a group with its defaults: `update` (when updates are applied), `download` (how
    /// versions are downloaded) and `push` (how edits are uploaded).
    ///
    /// ```swift
    /// var config = FerryClient.Configuration(directory: URL(fileURLWithPath: "/data/ferry"))
    /// config.serverURL = URL(string: "https://ferry.example.org")!
    /// config.dataset = "campgrounds"
    /// config.acceptedSchemaVersions = [3]
    /// config.download.waitForChanges = .seconds(30)
    /// config.push.attempts = 5
    /// ```
    public struct Configuration: Sendable {
        /// The client directory (created when missing); see ``ClientDirectory`` for its layout.
        public var directory: URL
        /// Base URL of the Ferry server, e.g. `http://127.0.0.1:8080`. Required by
        /// ``FerryClient/checkForUpdates(progress:)``.
        public var serverURL: URL?
        /// The dataset to fetch, `[a-z0-9_-]+`: its base name (`trips`), never a schema line (`trips.v2`). Required by
        /// ``FerryClient/checkForUpdates(progress:)``.
        public var dataset: String?
        /// Schema versions this app can read; nil (the default) accepts any. Every check sends them to the server
        /// (`…/manifest?schema=1,2`), which answers the newest live schema line among them (`trips.v2`, docs/client.md
        /// "Schema lines"); a server that has retired them all answers 410 (`FerryError.Code.schemaRetired`). A
        /// snapshot of another schema version is refused with `FerryError.Code.schemaVersion` and not downloaded
        /// again while it stays refused.
        public var acceptedSchemaVersions: Set<Int>?
        /// The access token for a scoped dataset; nil (default) sends none (a public dataset). A server that refuses it
        /// (401, or 403) makes fetch and push throw `FerryError.Code.unauthorized`: sign in again and retry; the
        /// data, a partial download and the queued edits are all kept. The token never appears in errors or logs.
        ///
        /// ```swift
        /// config.tokenProvider = { try await session.freshAccessToken() }
        /// ```
        public var tokenProvider: TokenProvider?
        /// How the client talks HTTP, for everything it sends (manifests, versions, patches, edits, attachments): the
        /// one place for a private CA, the timeouts and the connection pool (the token is ``tokenProvider``). Default
        /// ``URLSessionTransport/shared``; FerryClientNIO has `AsyncHTTPClientTransport`.
        ///
        /// ```swift
        /// config.transport = AsyncHTTPClientTransport(client: try AsyncHTTPClientTransport.makeHTTPClient(trusting: ca))
        /// ```
        public var transport: any HTTPTransport = URLSessionTransport.shared
        /// When a downloaded update is applied, and what runs during the swap.
        public var update = Update()
        /// How versions are downloaded.
        public var download = Download()
        /// How queued edits are uploaded.
        public var push = Push()
        /// How attachments are uploaded and kept on the device.
        public var attachments = Attachments()
        /// The stream of a partitioned dataset this configuration reads (``PartitionStream/pathSegments``); empty for
        /// a dataset. A stream's directory holds the stream's verified file as published: no outbox, no swap.
        var streamPath: [String] = []

        /// When a downloaded update is applied, and what runs during the swap.
        ///
        /// ```swift
        /// config.update.applyOnOpen = false   // the app applies it when the user asks
        /// ```
        public struct Update: Sendable {
            /// Apply a pending `updated.db` in ``FerryClient/open(configuration:logger:)`` before any
            /// connection is handed out, so a new version takes effect when the app starts. Default true.
            public var applyOnOpen = true
            /// Runs on the pending snapshot inside the swap; see ``FerryClient/PrepareUpdate``. Default none.
            public var prepare: PrepareUpdate?

            public init(applyOnOpen: Bool = true, prepare: PrepareUpdate? = nil) {
                self.applyOnOpen = applyOnOpen
                self.prepare = prepare
            }
        }

        /// How versions are downloaded.
        ///
        /// ```swift
        /// config.download.maxBytesPerSecond = 500_000
        /// config.download.waitForChanges = .seconds(30)
        /// ```
        public struct Download: Sendable {
            /// Take a row-level patch when the server offers one from the version this device holds and it is
            /// smaller than the compressed full download (docs/delta.md). A patch that cannot be downloaded, applied
            /// or verified falls back to the full download. False always downloads the full version. Default true.
            public var usePatches = true
            /// Bytes buffered before each write to the partial file. Default 1 MiB.
            public var writeBufferSize = 1 << 20
            /// Download at most this many bytes per second (like curl's `--limit-rate`); nil (default) is unlimited.
            public var maxBytesPerSecond: Int64?
            /// The longest one check waits in all when the server answers 429 or 5xx with `Retry-After`; a longer
            /// wait is reported as a network error instead. Default 10 s.
            public var retryAfterLimit: Duration = .seconds(10)
            /// Long-poll the manifest: each check asks the server to hold its answer up to this long until a new
            /// version exists (`Prefer: wait=N`, whole seconds, at most 60; a server answers at once when there is
            /// something new). ``FerryClient/watch(_:)`` then learns of a version as soon as the server serves it,
            /// with one request open per device, and a FerryGRDB database in `.automatic` mode runs that loop while
            /// it is open. Nil (default): no wait, a check answers at once. The transport's read timeout must exceed
            /// the wait: ``URLSessionTransport`` extends it per request; give AsyncHTTPClient a longer read timeout.
            public var waitForChanges: Duration?

            public init(
                usePatches: Bool = true, writeBufferSize: Int = 1 << 20, maxBytesPerSecond: Int64? = nil,
                retryAfterLimit: Duration = .seconds(10), waitForChanges: Duration? = nil
            ) {
                self.usePatches = usePatches
                self.writeBufferSize = writeBufferSize
                self.maxBytesPerSecond = maxBytesPerSecond
                self.retryAfterLimit = retryAfterLimit
                self.waitForChanges = waitForChanges
            }
        }

        /// How queued edits are uploaded.
        ///
        /// ```swift
        /// config.push.onOpen = false
        /// ```
        public struct Push: Sendable {
            /// Push the queued edits after the client opens (when the app becomes active), if a server is set. The
            /// push runs in the background: the open never waits for it. Default true.
            public var onOpen = true
            /// Upload attempts per batch before ``FerryClient/push(batchSize:)`` gives up (edits stay queued).
            /// Default 3.
            public var attempts = 3
            /// Wait before the first retry of an upload; doubled each time. Default 0.5 s.
            public var backoff: Duration = .milliseconds(500)
            /// The device clock, for `sentAt` (the server derives the clock offset from it). Default `Date()`.
            public var clock: @Sendable () -> Date = { Date() }

            public init(
                onOpen: Bool = true, attempts: Int = 3, backoff: Duration = .milliseconds(500),
                clock: @escaping @Sendable () -> Date = { Date() }
            ) {
                self.onOpen = onOpen
                self.attempts = attempts
                self.backoff = backoff
                self.clock = clock
            }
        }

        public init(
            directory: URL, serverURL: URL? = nil, dataset: String? = nil, acceptedSchemaVersions: Set<Int>? = nil
        ) {
            self.directory = directory
            self.serverURL = serverURL
            self.dataset = dataset
            self.acceptedSchemaVersions = acceptedSchemaVersions
        }

        /// Sends the same `token` with every request (nil sends none); use ``tokenProvider`` for a token that changes.
        ///
        /// ```swift
        /// config.setAccessToken(ProcessInfo.processInfo.environment["FERRY_TOKEN"])
        /// ```
        public mutating func setAccessToken(_ token: String?) {
            guard let token else {
                tokenProvider = nil
                return
            }
            tokenProvider = { @Sendable in token }
        }

        /// `SERVER/v1/datasets` (each line's manifest, versions and patches are under `…/{line}`) and the configured
        /// dataset, after validating both: the dataset must be a base name (a line, `trips.v2`, is what the server
        /// answers with, never what a client asks for).
        func datasetURL() throws -> (URL, String) {
            guard let serverURL else {
                throw FerryError(.badInput, "no server URL configured: set Configuration.serverURL", key: "serverURL")
            }
            guard let dataset else {
                throw FerryError(.badInput, "no dataset configured: set Configuration.dataset", key: "dataset")
            }
            try DatasetName.validateBase(dataset)
            guard let scheme = serverURL.scheme?.lowercased(), scheme == "http" || scheme == "https",
                serverURL.host != nil
            else {
                throw FerryError(
                    .badInput,
                    "server URL '\(redactURL(serverURL.absoluteString))' must be http:// or https:// with a host",
                    key: "serverURL")
            }
            var base = serverURL.absoluteString
            while base.hasSuffix("/") { base.removeLast() }
            guard let url = URL(string: "\(base)/v1/datasets") else {
                throw FerryError(.badInput, "server URL '\(redactURL(base))' is malformed", key: "serverURL")
            }
            return (url, dataset)
        }

        /// The manifest request of every check: `SERVER/v1/datasets/DATASET/manifest`, with `?schema=1,2` (the
        /// accepted schema versions, ascending) when ``acceptedSchemaVersions`` is set, so that the server answers
        /// the newest live line this app build reads.
        ///
        /// ```swift
        /// try config.manifestURL()   // http://127.0.0.1:8080/v1/datasets/trips/manifest?schema=1,2
        /// ```
        public func manifestURL() throws -> URL {
            let (datasets, dataset) = try datasetURL()
            return Self.manifestURL(datasets: datasets, dataset: dataset, accepted: acceptedSchemaVersions)
        }

        static func manifestURL(datasets: URL, dataset: String, accepted: Set<Int>?) -> URL {
            let url = datasets.appendingPathComponent(dataset).appendingPathComponent("manifest")
            guard let accepted, !accepted.isEmpty else { return url }
            let query = accepted.sorted().map(String.init).joined(separator: ",")
            // Digits and commas only: nothing to escape.
            return URL(string: url.absoluteString + "?schema=" + query)!
        }
    }
}
