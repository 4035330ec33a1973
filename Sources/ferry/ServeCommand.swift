import ArgumentParser
import FerryBucket
import FerryCore
import FerryMerge
import FerryPostgres
import FerryPublisher
import FerryServer
import Foundation
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import UnixSignals

#if canImport(Glibc)
    import Glibc
#endif

/// `ferry serve`: serves a snapshot store over HTTP until SIGTERM/SIGINT, then drains in-flight downloads.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve a snapshot store over HTTP (manifests, snapshots, retained versions).",
        discussion: """
            Picks up new versions within a second, keeps files open for downloads in flight, and on SIGTERM \
            stops accepting connections and waits up to --drain-timeout seconds for downloads to finish.
            Prints "ferry serve listening on http://HOST:PORT" once bound (useful with --port 0), or \
            "https://HOST:PORT" with --tls-cert and --tls-key, which serve HTTPS instead of plain HTTP.
            With --config and --database-url it also accepts device edits at POST /v1/datasets/{dataset}/changes, \
            and with --publish-every it publishes those templates into the store on a schedule, in-process.
            A template with `scope:` makes its dataset scoped: every route needs `Authorization: Bearer <token>`, \
            checked with the template's token query (answers cached for --token-cache-ttl seconds), and serves that scope's snapshot.
            With --status-token (or FERRY_STATUS_TOKEN) it serves an operator's status page at /status (HTML) and \
            /status.json to `Authorization: Bearer <token>`, or to ?token=<token> from this machine.
            """
    )

    @Option(
        name: .long,
        help: "The snapshot store the publisher writes: a directory, or a bucket (s3://BUCKET/PREFIX, docs/s3.md).")
    var store: String

    @Option(
        name: .customLong("s3-endpoint"),
        help: ArgumentHelp(
            "With an s3:// store: the S3 server's URL (default AWS_ENDPOINT_URL, else AWS).", valueName: "url"))
    var s3Endpoint: String?

    @Option(
        name: .customLong("manifest-poll"),
        help: ArgumentHelp(
            "With an s3:// store: how often each manifest is read (a conditional GET), e.g. 2s (the default) or 500ms.",
            valueName: "duration"), transform: ShortDuration.argument)
    var manifestPoll: Duration?

    @Option(
        name: .customLong("cache-dir"),
        help: ArgumentHelp(
            "With an s3:// store: where the temp directory of downloaded objects is made (default the system's temp directory); it is removed at exit.",
            valueName: "dir"))
    var cacheDir: String?

    @Flag(
        name: .customLong("presign-objects"),
        help: ArgumentHelp(
            "With an s3:// store: the object lookup also names a presigned URL of the object in the bucket (Ferry-Object-URL, valid 1 hour), so nginx fills its cache from the bucket, not from this replica (deploy/nginx/ferry.conf)."
        ))
    var presignObjects = false

    @Option(name: .long, help: "Address to listen on.")
    var host: String = "127.0.0.1"

    @Option(name: .long, help: "Port to listen on (0 picks a free port).")
    var port: Int = 8080

    @Option(
        name: .long,
        help:
            "Template files for the outbox endpoint and the token check of scoped datasets (repeatable); needs --database-url."
    )
    var config: [String] = []

    @Option(name: .customLong("database-url"), help: "PostgreSQL URL for the outbox endpoint; needs --config.")
    var databaseURL: String?

    @Option(
        name: .customLong("publish-every"),
        help: ArgumentHelp(
            "Also publish each --config template at this interval (e.g. 30s, 15m).", valueName: "duration"),
        transform: PublishInterval.argument)
    var publishEvery: PublishInterval?

    @Flag(
        name: .customLong("publish-on-change"),
        help: "Also publish each --config template when its source tables change (needs `ferry triggers install`).")
    var publishOnChange = false

    @Option(
        name: .long,
        help: ArgumentHelp(
            "With --publish-on-change: wait this long after the last notification (default 500ms).",
            valueName: "duration"), transform: ShortDuration.argument)
    var debounce: Duration = .milliseconds(500)

    @Option(
        name: .customLong("max-delay"),
        help: ArgumentHelp(
            "With --publish-on-change: publish at most this long after the first notification (default 5s).",
            valueName: "duration"), transform: ShortDuration.argument)
    var maxDelay: Duration = .seconds(5)

    @Option(
        name: .long, help: "Versions to keep per dataset when publishing with --publish-every or --publish-on-change.")
    var keep: Int = 5

    @Option(
        name: .customLong("change-retention"),
        help: ArgumentHelp(
            "How long the server keeps its answer to each uploaded change (a device resending the change within this gets the same answer, exactly once), e.g. 30d (the default) or 12h.",
            valueName: "duration"),
        transform: PublishInterval.argument)
    var changeRetention: PublishInterval = PublishInterval(seconds: 30 * 86_400)

    @Option(
        name: .customLong("retention-sweep-interval"),
        help: ArgumentHelp(
            "How often answers older than --change-retention are deleted, e.g. 1h (the default) or 10m.",
            valueName: "duration"),
        transform: PublishInterval.argument)
    var retentionSweepInterval: PublishInterval = PublishInterval(seconds: 3_600)

    @Option(
        name: .customLong("merger-connections"),
        help: ArgumentHelp(
            "PostgreSQL connections each dataset's change merger keeps open (1 to 64).", valueName: "count"))
    var mergerConnections: Int = 2

    @Option(
        name: .customLong("token-cache-ttl"),
        help: ArgumentHelp(
            "Seconds a token's scope (or its refusal) is cached: a revoke or a grant takes effect within this (0 to 3600).",
            valueName: "seconds"))
    var tokenCacheTTL: Double = 5

    @Option(name: .customLong("drain-timeout"), help: "Seconds SIGTERM waits for in-flight downloads.")
    var drainTimeout: Double = 30

    @Option(
        name: .customLong("idle-timeout"),
        help: ArgumentHelp(
            "Seconds a keep-alive connection with no request in flight stays open (0: forever).", valueName: "seconds"))
    var idleTimeout: Double = 60

    @Option(
        name: .customLong("header-timeout"),
        help: ArgumentHelp(
            "Seconds a client may take to send a request's line and headers from their first byte (0: no limit).",
            valueName: "seconds"))
    var headerTimeout: Double = 10

    @Option(
        name: .customLong("max-header-bytes"),
        help: ArgumentHelp("Largest request line plus headers; larger is answered 400.", valueName: "bytes"))
    var maxHeaderBytes: Int = 80 * 1024

    @Option(
        name: .customLong("max-body-bytes"),
        help: ArgumentHelp(
            "Largest change batch body; larger is answered 413 and the connection closed.", valueName: "bytes"))
    var maxBodyBytes: Int = ChangeRequest.Limits().maxBodyBytes

    @Option(
        name: .customLong("max-changes"),
        help: ArgumentHelp("Most changes in one uploaded batch; more is answered 400.", valueName: "count"))
    var maxChanges: Int = ChangeRequest.Limits().maxChanges

    @Option(
        name: .customLong("download-buffer-bytes"),
        help: ArgumentHelp(
            "Most memory all downloads together hold in file chunks (at least 2 MiB); beyond it, downloads take turns.",
            valueName: "bytes"))
    var downloadBufferBytes: Int = 64 << 20

    @Option(
        name: .customLong("tls-cert"),
        help: ArgumentHelp(
            "Serve HTTPS with this certificate chain (PEM, server certificate first); needs --tls-key.",
            valueName: "pem"))
    var tlsCert: String?

    @Option(
        name: .customLong("tls-key"),
        help: ArgumentHelp("The private key of --tls-cert (PEM, unencrypted); needs --tls-cert.", valueName: "pem"))
    var tlsKey: String?

    @Option(
        name: .customLong("status-token"),
        help: ArgumentHelp(
            "Serve the operator's status page at /status and /status.json to holders of this token (or set FERRY_STATUS_TOKEN).",
            valueName: "token"))
    var statusToken: String?

    @Flag(name: .long, help: "Log one line per request (debug level).")
    var verbose = false

    func validate() throws {
        let location: StoreLocation
        do {
            location = try StoreLocation(parsing: store)
        } catch let error as FerryError {
            throw ValidationError(error.message)
        }
        switch location {
        case .directory:
            for (flag, given) in [
                ("--s3-endpoint", s3Endpoint != nil), ("--manifest-poll", manifestPoll != nil),
                ("--cache-dir", cacheDir != nil), ("--presign-objects", presignObjects),
            ] where given {
                throw ValidationError("\(flag) needs a bucket store (--store s3://BUCKET/PREFIX), not a directory")
            }
        case .bucket:
            if let manifestPoll, manifestPoll < .milliseconds(100) {
                throw ValidationError("--manifest-poll must be at least 100ms")
            }
        }
        guard (0...65535).contains(port) else {
            throw ValidationError("--port must be between 0 and 65535, got \(port)")
        }
        // Seconds become milliseconds in an Int64: a day is far beyond any sane value and far below overflow.
        guard (0...86_400).contains(drainTimeout) else {
            throw ValidationError("--drain-timeout must be 0 to 86400 seconds")
        }
        guard (0...86_400).contains(idleTimeout) else {
            throw ValidationError("--idle-timeout must be 0 (forever) to 86400 seconds")
        }
        guard (0...86_400).contains(headerTimeout) else {
            throw ValidationError("--header-timeout must be 0 (no limit) to 86400 seconds")
        }
        guard maxHeaderBytes >= 1024 else { throw ValidationError("--max-header-bytes must be at least 1024") }
        guard maxBodyBytes >= 1024 else { throw ValidationError("--max-body-bytes must be at least 1024") }
        guard maxChanges >= 1 else { throw ValidationError("--max-changes must be at least 1") }
        // Two chunks of 1 MiB at the least: one download must always be able to stream.
        guard downloadBufferBytes >= 2 << 20 else {
            throw ValidationError(
                "--download-buffer-bytes must be at least 2097152 (2 MiB, two 1 MiB chunks), got \(downloadBufferBytes)"
            )
        }
        guard (0...3600).contains(tokenCacheTTL) else {
            throw ValidationError(
                "--token-cache-ttl must be 0 (ask PostgreSQL every time) to 3600 seconds, got \(tokenCacheTTL)")
        }
        guard (1...64).contains(mergerConnections) else {
            throw ValidationError("--merger-connections must be between 1 and 64, got \(mergerConnections)")
        }
        if !config.isEmpty && databaseURL == nil {
            throw ValidationError("--config needs --database-url (the outbox endpoint writes to PostgreSQL)")
        }
        if databaseURL != nil && config.isEmpty {
            throw ValidationError("--database-url needs at least one --config template for the outbox endpoint")
        }
        if let databaseURL, !(databaseURL.hasPrefix("postgres://") || databaseURL.hasPrefix("postgresql://")) {
            throw ValidationError("--database-url must be a postgres:// URL, got '\(redactURL(databaseURL))'")
        }
        if publishEvery != nil && config.isEmpty {
            throw ValidationError("--publish-every needs --config templates and --database-url to publish")
        }
        if publishOnChange && config.isEmpty {
            throw ValidationError("--publish-on-change needs --config templates and --database-url to publish")
        }
        guard keep >= 1 else { throw ValidationError("--keep must be at least 1") }
        if let token = effectiveStatusToken, token.count < 16 || token.contains(where: \.isWhitespace) {
            throw ValidationError(
                "--status-token (or FERRY_STATUS_TOKEN) must be at least 16 characters without spaces")
        }
        for path in config where !FileManager.default.fileExists(atPath: path) {
            throw ValidationError("--config file '\(path)' does not exist")
        }
        if let tls = try tlsSettings() {
            do {
                _ = try tls.makeTLSConfiguration()
            } catch let error as FerryError {
                let option = error.path == tls.privateKey.path ? "--tls-key" : "--tls-cert"
                throw ValidationError("\(option) \(error)")
            }
        }
    }

    /// `--status-token`, else a non-empty `FERRY_STATUS_TOKEN`, else nil (no status page).
    var effectiveStatusToken: String? {
        statusToken ?? ProcessInfo.processInfo.environment["FERRY_STATUS_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Both TLS files or neither.
    func tlsSettings() throws -> ServerConfiguration.TLSSettings? {
        switch (tlsCert, tlsKey) {
        case (nil, nil): return nil
        case (_?, nil): throw ValidationError("--tls-cert needs --tls-key (the certificate's private key, PEM)")
        case (nil, _?): throw ValidationError("--tls-key needs --tls-cert (the certificate chain, PEM)")
        case (let cert?, let key?):
            return .init(certificateChain: URL(fileURLWithPath: cert), privateKey: URL(fileURLWithPath: key))
        }
    }

    /// The server keeps every retained snapshot (and its gzip copy) open, so a scoped dataset with many scopes needs
    /// more descriptors than the usual soft limit of 1024: raise the soft limit to the hard one.
    static func raiseOpenFileLimit() {
        #if canImport(Glibc)
            var limit = rlimit()
            let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
            if getrlimit(resource, &limit) == 0, limit.rlim_cur < limit.rlim_max {
                limit.rlim_cur = limit.rlim_max
                _ = setrlimit(resource, &limit)
            }
        #endif
    }

    /// Streamed downloads allocate a 1 MiB buffer per chunk on the thread pool and free it on an event loop. With
    /// glibc's dynamic mmap threshold those buffers move into the per-thread arenas after the first free, and
    /// fragmentation kept the server's RSS at several times the memory in use (measured by scripts/hostile: 10
    /// concurrent 130 MB downloads left RSS 250 MiB above idle, 50 left 900 MiB, and it never came back). A fixed
    /// threshold keeps such buffers in their own mappings, returned to the system when freed.
    static func fixMallocThreshold() {
        #if canImport(Glibc)
            // mallopt is declared in <malloc.h>, which the Glibc module does not import: look it up. Only a tuning: if
            // it is missing or fails, glibc keeps its default behaviour, which is correct, just heavier.
            typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
            let mmapThreshold: Int32 = -3  // M_MMAP_THRESHOLD in <malloc.h>
            if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") {
                _ = unsafeBitCast(symbol, to: Mallopt.self)(mmapThreshold, 128 * 1024)
            }
        #endif
    }

    /// Every limit the server runs with, named by its option, as read back from the configuration (so a test or an
    /// operator sees what the server actually got, not what was typed).
    static func limitsMetadata(_ configuration: ServerConfiguration) -> Logger.Metadata {
        func seconds(_ duration: Duration?) -> Logger.MetadataValue {
            guard let duration else { return "0" }
            let (whole, attoseconds) = duration.components
            return .string(attoseconds == 0 ? "\(whole)" : "\(Double(whole) + Double(attoseconds) / 1e18)")
        }
        var limits: Logger.Metadata = [
            "max-body-bytes": "\(configuration.changeLimits.maxBodyBytes)",
            "max-changes": "\(configuration.changeLimits.maxChanges)",
            "max-header-bytes": "\(configuration.maxHeaderBytes)",
            "header-timeout": seconds(configuration.headerTimeout),
            "idle-timeout": seconds(configuration.idleTimeout),
            "drain-timeout": seconds(configuration.drainTimeout),
            "download-buffer-bytes": "\(configuration.downloadBufferBytes)",
            "token-cache-ttl": seconds(configuration.tokenCacheTTL),
        ]
        if let database = configuration.database {
            limits["change-retention"] = seconds(database.changeRetention)
            limits["retention-sweep-interval"] = seconds(database.retentionSweepInterval)
            limits["merger-connections"] = "\(database.mergerConnections)"
        }
        return limits
    }

    func run() async throws {
        Self.raiseOpenFileLimit()
        Self.fixMallocThreshold()
        let level: Logger.Level = verbose ? .debug : .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        var logger = Logger(label: "ferry.serve")
        logger.logLevel = level

        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))

        var configuration = ServerConfiguration(
            storePath: URL(fileURLWithPath: store), host: host, port: port,
            drainTimeout: .milliseconds(Int64(drainTimeout * 1000)), metricsRegistry: registry)
        configuration.tls = try tlsSettings()
        configuration.idleTimeout = idleTimeout > 0 ? .milliseconds(Int64(idleTimeout * 1000)) : nil
        configuration.headerTimeout = headerTimeout > 0 ? .milliseconds(Int64(headerTimeout * 1000)) : nil
        configuration.maxHeaderBytes = maxHeaderBytes
        configuration.changeLimits.maxBodyBytes = maxBodyBytes
        configuration.changeLimits.maxChanges = maxChanges
        configuration.downloadBufferBytes = downloadBufferBytes
        configuration.tokenCacheTTL = .milliseconds(Int64(tokenCacheTTL * 1000))
        configuration.statusToken = effectiveStatusToken
        let statusBoard = configuration.statusBoard
        if let databaseURL {
            var database = ServerConfiguration.DatabaseSettings(
                templatePaths: config.map { URL(fileURLWithPath: $0) }, databaseURL: databaseURL)
            database.changeRetention = changeRetention.duration
            database.retentionSweepInterval = retentionSweepInterval.duration
            database.mergerConnections = mergerConnections
            configuration.database = database
        }
        logger.info("ferry serve limits", metadata: Self.limitsMetadata(configuration))

        // The one piece the CLI adds to the server: an in-process publish schedule (only the CLI links both the
        // server and the publisher). The server prunes tombstones when its catalog sees the new manifests.
        // With a bucket store the publisher builds in a cache of its own (a temp directory, removed at exit) and
        // uploads into the bucket (BucketPublisher); the replica below sees the new manifest at its next poll.
        var schedules: [any Service] = []
        let storeLocation = try? StoreLocation(parsing: store)  // validate() parsed it already
        var isBucket = false
        if case .bucket = storeLocation { isBucket = true }
        var publisherCache: URL?
        // A temp dir: what a failed removal leaves, the OS cleans.
        defer { if let publisherCache { try? FileManager.default.removeItem(at: publisherCache) } }
        if publishEvery != nil || publishOnChange, let databaseURL {
            // A publish into the store directory is served at once, not at the catalog's next poll (a bucket's
            // replica finds it at its next --manifest-poll, as any other publisher's).
            let storeChanges = isBucket ? nil : StoreChanges()
            configuration.storeChanges = storeChanges
            if isBucket {
                publisherCache = (cacheDir.map { URL(fileURLWithPath: $0) } ?? FileManager.default.temporaryDirectory)
                    .appendingPathComponent("ferry-publisher-cache-\(UUID().uuidString)", isDirectory: true)
            }
            // The templates of one dataset are its schema lines: one publisher publishes them together.
            var pathsByDataset: [(dataset: String, paths: [String])] = []
            for path in config {
                let dataset = try Template.load(path: path).dataset
                if let index = pathsByDataset.firstIndex(where: { $0.dataset == dataset }) {
                    pathsByDataset[index].paths.append(path)
                } else {
                    pathsByDataset.append((dataset, [path]))
                }
            }
            for (dataset, paths) in pathsByDataset {
                let publisher: any Publishing
                if case .bucket(let location) = storeLocation, let publisherCache {
                    guard paths.count == 1 else {
                        throw ValidationError(
                            "--store \(store): schema lines (several --config for dataset '\(dataset)') are published into a store directory only; a bucket is not built yet (docs/schema-lines.md)"
                        )
                    }
                    publisher = try BucketPublisher.fromEnvironment(
                        configuration: .init(
                            templatePath: paths[0], databaseURL: databaseURL, store: publisherCache, keep: keep),
                        location: location, endpoint: s3Endpoint, objectGrace: .seconds(3600), logger: logger)
                } else {
                    var configuration = Publisher.Configuration(
                        templatePath: paths[0], databaseURL: databaseURL, store: URL(fileURLWithPath: store),
                        keep: keep)
                    configuration.templatePaths = paths
                    publisher = Publisher(configuration: configuration, logger: logger)
                }
                // The status page shows each dataset's last in-process publish.
                let onRun: @Sendable (Result<PublishResult, any Error>) -> Void = { outcome in
                    switch outcome {
                    case .success(let result):
                        statusBoard.recordPublish(
                            dataset: result.dataset,
                            outcome: result.unchanged
                                ? .unchanged(version: result.version) : .published(version: result.version))
                        if !result.unchanged, let storeChanges { Task { await storeChanges.changed() } }
                    case .failure(let error):
                        statusBoard.recordPublish(dataset: dataset, outcome: .failed(message: "\(error)"))
                    }
                }
                if publishOnChange {
                    // --publish-every is then the safety net for changes no trigger saw.
                    schedules.append(
                        OnChangeSchedule(
                            publisher: publisher, channel: ChangeTriggers.channel(for: dataset), debounce: debounce,
                            maxDelay: maxDelay,
                            every: publishEvery?.duration, logger: logger, onRun: { _, outcome in onRun(outcome) }))
                } else if let publishEvery {
                    schedules.append(
                        PublishSchedule(publisher: publisher, every: publishEvery, logger: logger, onRun: onRun))
                }
            }
        }
        // A bucket store: the replica's first sync completes (or fails, naming the setting) before anything
        // listens, and it keeps polling as the group's first service, so it stops last.
        var replica: BucketReplica?
        if case .some(.bucket) = storeLocation, let location = storeLocation {
            do {
                let bucketReplica = try BucketReplica.fromEnvironment(
                    location: location, endpoint: s3Endpoint,
                    cacheParent: cacheDir.map { URL(fileURLWithPath: $0) }, pollInterval: manifestPoll ?? .seconds(2),
                    logger: logger)
                replica = bucketReplica
                try await bucketReplica.start()
            } catch {
                replica?.removeCache()
                FileHandle.standardError.write(Data("ferry serve: \(error)\n".utf8))
                throw ExitCode(1)
            }
            configuration.store = replica?.store
            configuration.storeName = store
            if presignObjects, let bucketReplica = replica {
                configuration.objectURL = { dataset, object in
                    bucketReplica.objectURL(dataset: dataset, object: object)
                }
            }
            configuration.storePath = replica?.store.cacheDirectory ?? configuration.storePath
        }
        let app: any Service
        do {
            // this process publishes into it
            if !schedules.isEmpty, !isBucket { try DurableFile.makeDirectory(URL(fileURLWithPath: store)) }
            let (scheme, host) = (configuration.scheme, self.host)
            app = try await buildApplication(configuration, logger: logger) { port in
                FileHandle.standardOutput.write(Data("ferry serve listening on \(scheme)://\(host):\(port)\n".utf8))
            }
        } catch {
            replica?.removeCache()
            FileHandle.standardError.write(Data("ferry serve: \(error)\n".utf8))
            throw ExitCode(1)
        }
        // ServiceGroup stops services in reverse order: the schedules first, then the server drains.
        var groupConfiguration = ServiceGroupConfiguration(
            services: (replica.map { [$0 as any Service] } ?? []) + [app] + schedules, logger: logger)
        groupConfiguration.gracefulShutdownSignals = [.sigterm, .sigint]
        groupConfiguration.maximumGracefulShutdownDuration = configuration.drainTimeout
        groupConfiguration.maximumCancellationDuration = .seconds(2)
        do {
            try await ServiceGroup(configuration: groupConfiguration).run()
        } catch let error as ServiceGroupError {
            logger.warning("stopped without draining every download: \(error)")
        } catch {
            FileHandle.standardError.write(Data("ferry serve: \(error)\n".utf8))
            throw ExitCode(1)
        }
        logger.info("ferry serve stopped")
    }
}
