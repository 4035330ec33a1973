import ArgumentParser
import FerryBucket
import FerryCore
import FerryServer
import FerryService
import Foundation
import Logging
import Metrics
import Prometheus
import UnixSignals

/// `ferry serve`: serves a snapshot store over HTTP until SIGTERM/SIGINT, then drains in-flight downloads. It parses
/// flags into a ``ServeConfiguration`` and runs FerryService's ``ServerAssembly`` with it.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve a snapshot store over HTTP (manifests, snapshots, retained versions).",
        discussion: """
            Picks up new versions within a second, keeps files open for downloads in flight, and on SIGTERM \
            stops accepting connections and waits up to --drain-timeout for downloads to finish.
            Prints "ferry serve listening on http://HOST:PORT" once bound (useful with --port 0), or \
            "https://HOST:PORT" with --tls-cert and --tls-key, which serve HTTPS instead of plain HTTP.
            With --config and --database-url it also accepts device edits at POST /v1/datasets/{dataset}/changes, \
            and with --publish-every or --publish-on-change it publishes those templates into the store in-process, \
            as `ferry schedule` would (--keep, --no-patches, --full, --object-grace as for `ferry publish`).
            A template with `scope:` makes its dataset scoped: every route needs `Authorization: Bearer <token>`, \
            checked with the template's token query (answers cached for --token-cache-ttl), and serves that scope's snapshot.
            With --status-token (or FERRY_STATUS_TOKEN) it serves an operator's status page at /status (HTML) and \
            /status.json to `Authorization: Bearer <token>`, or to ?token=<token> from this machine.
            All durations take ms, s, m, h or d (a bare number is seconds).
            """
    )

    @OptionGroup var store: ServeStoreOptions

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
        transform: Duration.intervalArgument)
    var publishEvery: Duration?

    @Flag(
        name: .customLong("publish-on-change"),
        help: "Also publish each --config template when its source tables change (needs `ferry triggers install`).")
    var publishOnChange = false

    @OptionGroup var timing: OnChangeOptions
    @OptionGroup var publishing: PublishOptions
    @OptionGroup var limits: ServeLimitsOptions
    @OptionGroup var tls: TLSOptions
    @OptionGroup var jwt: JWTOptions

    @Option(
        name: .customLong("status-token"),
        help: ArgumentHelp(
            "Serve the operator's status page at /status and /status.json to holders of this token (or set FERRY_STATUS_TOKEN).",
            valueName: "token"))
    var statusToken: String?

    @Flag(name: .long, help: "Log one line per request (debug level).")
    var verbose = false

    func validate() throws {
        _ = try StoreLocation(flag: store.store, refusing: store.bucketOnlyFlags + publishing.bucketOnlyFlags)
        guard (0...65535).contains(port) else {
            throw ValidationError("--port must be between 0 and 65535, got \(port)")
        }
        if !config.isEmpty && databaseURL == nil {
            throw ValidationError("--config needs --database-url (the outbox endpoint writes to PostgreSQL)")
        }
        if !jwt.jwks.isEmpty && config.isEmpty {
            throw ValidationError("--jwks needs --config templates whose `scope:` names a `claim:`")
        }
        if databaseURL != nil && config.isEmpty {
            throw ValidationError("--database-url needs at least one --config template for the outbox endpoint")
        }
        if let databaseURL, !(databaseURL.hasPrefix("postgres://") || databaseURL.hasPrefix("postgresql://")) {
            throw ValidationError("--database-url must be a postgres:// URL, got '\(redactURL(databaseURL))'")
        }
        for (flag, given) in [("--publish-every", publishEvery != nil), ("--publish-on-change", publishOnChange)]
        where given && config.isEmpty {
            throw ValidationError("\(flag) needs --config templates and --database-url to publish")
        }
        if let token = effectiveStatusToken, token.count < 16 || token.contains(where: \.isWhitespace) {
            throw ValidationError(
                "--status-token (or FERRY_STATUS_TOKEN) must be at least 16 characters without spaces")
        }
        for path in config where !FileManager.default.fileExists(atPath: path) {
            throw ValidationError("--config file '\(path)' does not exist")
        }
    }

    /// `--status-token`, else a non-empty `FERRY_STATUS_TOKEN`, else nil (no status page).
    var effectiveStatusToken: String? {
        statusToken ?? ProcessInfo.processInfo.environment["FERRY_STATUS_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// The whole server these flags describe, with its metrics in `registry`.
    func serveConfiguration(registry: PrometheusCollectorRegistry) throws -> ServeConfiguration {
        var server = ServerConfiguration(
            storePath: URL(fileURLWithPath: store.store), host: host, port: port, metricsRegistry: registry)
        server.tls = try tls.settings()
        server.statusToken = effectiveStatusToken
        if let databaseURL {
            server.database = .init(templatePaths: config.map { URL(fileURLWithPath: $0) }, databaseURL: databaseURL)
            server.database?.jwt = jwt.settings
        }
        limits.apply(to: &server)
        let location = try StoreLocation(flag: store.store)
        if case .directory = location, let cacheDir = store.access.cacheDir {
            server.builds.directory = URL(fileURLWithPath: cacheDir)
        }
        var configuration = ServeConfiguration(server: server, store: location)
        configuration.bucket = store.bucket
        if let trigger = timing.trigger(onChange: publishOnChange, every: publishEvery) {
            configuration.publishing = .init(trigger: trigger, policy: publishing.policy)
        }
        return configuration
    }

    func run() async throws {
        ProcessTuning.raiseOpenFileLimit()
        ProcessTuning.fixMallocThreshold()
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

        let configuration = try serveConfiguration(registry: registry)
        logger.info("ferry serve limits", metadata: configuration.server.limitsMetadata)
        let assembly: ServerAssembly
        do {
            // A combination of settings the library refuses (schema lines into a bucket) is a usage error.
            assembly = try await usageError {
                try await ServerAssembly.start(configuration, logger: logger) { url in
                    FileHandle.standardOutput.write(Data("ferry serve listening on \(url)\n".utf8))
                }
            }
        } catch let error as ValidationError {
            throw error
        } catch {
            FileHandle.standardError.write(Data("ferry serve: \(error)\n".utf8))
            throw ExitCode(1)
        }
        do {
            try await assembly.run(gracefulShutdownSignals: [.sigterm, .sigint])
        } catch {
            FileHandle.standardError.write(Data("ferry serve: \(error)\n".utf8))
            throw ExitCode(1)
        }
        logger.info("ferry serve stopped")
    }
}
