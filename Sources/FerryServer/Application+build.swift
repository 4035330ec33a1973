import FerryCore
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import NIOPosix

/// Builds the HTTP layer of a Ferry server over a store: the catalog over `configuration.storePath` (loaded once, so
/// the first request already sees every dataset, then polled), the HTTP routes, and with
/// ``ServerConfiguration/database`` the change mergers, the token checks of scoped datasets and the
/// ``RetentionService``. Everything runs as services of the returned application and stops gracefully with it:
/// the HTTP server drains first, then the mergers and token checks close their connections. A whole server (a
/// bucket's replica, in-process publish schedules) is FerryService's `ServerAssembly`, the one entry point `ferry
/// serve` uses; this is the layer it builds on, and what tests of the HTTP layer alone start.
///
/// ```swift
/// var configuration = ServerConfiguration(storePath: storeURL)
/// configuration.database = .init(templatePaths: [templateURL], databaseURL: url)
/// let app = try await buildApplication(configuration, logger: logger)
/// try await app.runService()
/// ```
///
/// - Parameter onServerRunning: called with the bound port once the server listens (useful with port 0).
public func buildApplication(
    _ configuration: ServerConfiguration, logger: Logger,
    onServerRunning: @escaping @Sendable (_ port: Int) async -> Void = { _ in }
) async throws -> some ApplicationProtocol {
    try checkStore(configuration)
    let wiring = try await ServerWiring.start(configuration.database, logger: logger)
    do {
        return try await buildApplication(
            configuration, logger: logger, wiring: wiring, onServerRunning: onServerRunning)
    } catch {
        wiring.shutdown()
        throw error
    }
}

/// The store must exist before anything starts: its absence is a setup error, not an empty server.
func checkStore(_ configuration: ServerConfiguration) throws {
    if configuration.dependencies.store != nil { return }  // the caller's store, already read
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: configuration.storePath.path, isDirectory: &isDirectory),
        isDirectory.boolValue
    else {
        throw FerryError(
            .notFound,
            "the snapshot store does not exist: create it by publishing into it, or name the right directory",
            path: configuration.storePath.path)
    }
}

/// The application over already-started mergers and token checks (tests pass a merger with an injected clock).
func buildApplication(
    _ configuration: ServerConfiguration, logger: Logger, wiring: ServerWiring,
    onServerRunning: @escaping @Sendable (_ port: Int) async -> Void = { _ in }
) async throws -> some ApplicationProtocol {
    try checkStore(configuration)
    let metrics = ServerMetrics(registry: configuration.metricsRegistry)
    let catalog = SnapshotCatalog(
        store: configuration.dependencies.store ?? FileSnapshotStore(root: configuration.storePath),
        pollInterval: configuration.effectivePollInterval,
        logger: logger, metrics: metrics, builds: configuration.builds)
    try await catalog.refresh()
    configuration.dependencies.storeChanges?.attach(catalog)
    let access = DatasetAccess(
        catalog: catalog, scopes: wiring.tokenChecks(ttl: configuration.tokenCacheTTL), logger: logger)
    let changes: [any ServerRouteGroup] =
        wiring.mergers.isEmpty ? [] : [ChangesRoute(mergers: wiring.mergers, limits: configuration.changeLimits)]
    let fleet = try await DeviceFleet.start(configuration, sightings: catalog.devices, logger: logger)
    let attachmentFiles = AttachmentFiles()
    let router = try buildRouter(
        configuration, catalog: catalog, access: access, metrics: metrics, logger: logger,
        extraRoutes: changes + FleetRoutes.groups(configuration, fleet: fleet, catalog: catalog, wiring: wiring),
        attachmentFiles: attachmentFiles)
    let revalidator =
        configuration.channelRevalidation.enabled
        ? ChannelRevalidator(
            access: access, metrics: metrics, traffic: configuration.dependencies.statusBoard.traffic, logger: logger,
            onAnswer: configuration.channelRevalidation.onAnswer,
            onDownload: configuration.channelRevalidation.onDownload, attachments: attachmentFiles)
        : nil
    let channel = configuration.http1Channel
    let http1 = HTTPServerBuilder { responder in
        var child = RevalidatingHTTP1Channel(responder: responder, configuration: channel, revalidator: revalidator)
        child.sendsFiles = configuration.tls == nil && configuration.channelRevalidation.sendsFiles
        return child
    }
    var app = Application(
        router: router,
        server: try configuration.tls.map { try .tls(http1, tlsConfiguration: $0.makeTLSConfiguration()) } ?? http1,
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: nil),
        onServerRunning: { channel in
            let port = channel.localAddress?.port ?? configuration.port
            logger.info(
                "ferry serve listening on \(configuration.scheme)://\(configuration.host):\(port)",
                metadata: [
                    "store": .string(configuration.dependencies.storeName ?? configuration.storePath.path),
                    "datasets": .string(catalog.summary.joined(separator: ", ")),
                ])
            await onServerRunning(port)
        },
        logger: logger)
    // Hummingbird stops its services after the HTTP server, in reverse order: retention and the catalog first,
    // then the token checks and mergers close their connections.
    app.addServices(wiring.services)
    if let fleet { app.addServices(fleet) }
    app.addServices(catalog)
    app.addServices(
        AttachmentRetention(
            catalog: catalog, store: configuration.effectiveAttachmentStore,
            uploads: PartialUploads(root: configuration.effectiveAttachmentUploads),
            grace: configuration.attachmentGrace, partialExpiry: configuration.partialUploadExpiry,
            sweepInterval: configuration.database?.retentionSweepInterval ?? .seconds(3_600), metrics: metrics,
            logger: logger, files: attachmentFiles))
    if let database = configuration.database, !wiring.mergers.isEmpty {
        app.addServices(
            RetentionService(
                catalog: catalog, mergers: wiring.mergers, changeRetention: database.changeRetention,
                sweepInterval: database.retentionSweepInterval, checkInterval: configuration.effectivePollInterval,
                metrics: metrics,
                logger: logger))
    }
    return app
}

/// Builds the router: `/v1/datasets`, `/v1/datasets/{dataset}/manifest` (with the long-poll of `Prefer: wait`,
/// ``ManifestLongPoll``), `/snapshot`, `/versions/{version}`,
/// `/patches/{patch}`, `/objects/{object}` and the object lookups, `/healthz`, `/metrics`, then each of
/// `extraRoutes`.
///
/// ```swift
/// let router = try buildRouter(configuration, catalog: catalog, logger: logger)
/// ```
public func buildRouter(
    _ configuration: ServerConfiguration, catalog: SnapshotCatalog, logger: Logger,
    extraRoutes: [any ServerRouteGroup] = [], scopeAuthorities: [String: any ScopeAuthority] = [:]
) throws -> Router<BasicRequestContext> {
    try buildRouter(
        configuration, catalog: catalog,
        access: DatasetAccess(
            catalog: catalog,
            scopes: scopeAuthorities.mapValues { TokenScopes(authority: $0, ttl: configuration.tokenCacheTTL) },
            logger: logger),
        metrics: catalog.metrics ?? ServerMetrics(registry: configuration.metricsRegistry), logger: logger,
        extraRoutes: extraRoutes)
}

func buildRouter(
    _ configuration: ServerConfiguration, catalog: SnapshotCatalog, access: DatasetAccess, metrics: ServerMetrics,
    logger: Logger,
    extraRoutes: [any ServerRouteGroup], attachmentFiles: AttachmentFiles = AttachmentFiles()
) throws -> Router<BasicRequestContext> {
    let router = Router(context: BasicRequestContext.self)
    let table = Locked(RouteTable())
    router.add(
        middleware: ServerMiddleware(
            metrics: metrics, routes: table, traffic: configuration.dependencies.statusBoard.traffic,
            devices: catalog.devices,
            servesDataset: { name in
                catalog.access(name) != nil || catalog.access(DatasetName.base(of: name) ?? "") != nil
            }
        ))
    let routes = ServerRoutes(
        router: router, table: table, configuration: configuration, catalog: catalog, access: access, logger: logger)
    let snapshots = SnapshotResponder(
        access: access, chunkSize: max(64 * 1024, configuration.chunkSize), threadPool: .singleton,
        objectURL: configuration.dependencies.objectURL,
        budget: BufferBudget(slots: configuration.downloadBufferBytes / max(64 * 1024, configuration.chunkSize)))
    let groups: [any ServerRouteGroup] =
        [
            ReadRoutes(snapshots: snapshots, metrics: metrics),
            AttachmentRoutes(
                store: configuration.effectiveAttachmentStore,
                uploads: PartialUploads(root: configuration.effectiveAttachmentUploads), snapshots: snapshots,
                metrics: metrics, maxBytes: configuration.maxAttachmentBytes,
                partialExpiry: configuration.partialUploadExpiry, files: attachmentFiles),
        ] + extraRoutes
        + (configuration.statusToken.map {
            [
                StatusRoutes(
                    access: StatusAccess(token: $0), board: configuration.dependencies.statusBoard,
                    store: configuration.dependencies.storeName ?? configuration.storePath.path)
            ]
        } ?? [])
    for group in groups { try group.addRoutes(to: routes) }
    return router
}

/// A set of routes added to the server, the extension point for endpoints beyond the read path. Pass groups to
/// ``buildRouter(_:catalog:logger:extraRoutes:scopeAuthorities:)``; ``buildApplication(_:logger:onServerRunning:)``
/// adds its own (``ChangesRoute`` when the configuration names a database).
///
/// ```swift
/// struct OutboxRoutes: ServerRouteGroup {
///     func addRoutes(to routes: ServerRoutes) throws {
///         routes.on("/v1/datasets/{dataset}/changes", method: .post) { request, context in
///             HTTPResponse.Status.ok
///         }
///     }
/// }
/// let router = try buildRouter(configuration, catalog: catalog, logger: logger, extraRoutes: [OutboxRoutes()])
/// ```
public protocol ServerRouteGroup: Sendable {
    /// Registers the group's routes. Throw to refuse to start (e.g. a bad template).
    func addRoutes(to routes: ServerRoutes) throws
}

/// What a ``ServerRouteGroup`` registers its routes on: the router, plus the configuration and catalog.
/// Register through ``on(_:method:use:)`` so the path also answers 405 for other methods, and throw
/// ``ServerError`` for JSON errors.
///
/// Not `Sendable`: it holds Hummingbird's `Router`, which is not (its routes are added while the server is built,
/// before any request), and a group registers its routes synchronously in ``ServerRouteGroup/addRoutes(to:)``.
public struct ServerRoutes {
    /// The Hummingbird router; the server's middleware (errors, metrics, logging) applies to every route.
    public let router: Router<BasicRequestContext>
    let table: Locked<RouteTable>
    public let configuration: ServerConfiguration
    public let catalog: SnapshotCatalog
    /// Who may read or write what: the public view, or the scope of the request's bearer token.
    public let access: DatasetAccess
    public let logger: Logger

    /// Adds a route (`{name}` marks a parameter, read with `context.parameters.get("name")`).
    ///
    /// ```swift
    /// routes.on("/v1/datasets/{dataset}/changes", method: .post) { request, context in HTTPResponse.Status.ok }
    /// ```
    public func on<Output: ResponseGenerator>(
        _ path: String, method: HTTPRequest.Method,
        use handler: @escaping @Sendable (Request, BasicRequestContext) async throws -> Output
    ) {
        table.withLock { $0.add(path, method: method) }
        router.on(RouterPath(path), method: method, use: handler)
    }
}

/// The read path: datasets, manifests, snapshots, versions, patches, objects, health and metrics.
struct ReadRoutes: ServerRouteGroup {
    let snapshots: SnapshotResponder
    let metrics: ServerMetrics

    func addRoutes(to routes: ServerRoutes) throws {
        let catalog = routes.catalog
        let access = routes.access
        let snapshots = self.snapshots
        let metrics = self.metrics
        routes.on("/v1/datasets", method: .get) { _, _ in Self.json(catalog.listBody) }
        routes.on("/v1/datasets", method: .head) { _, _ in Self.json(catalog.listBody).createHeadResponse() }
        for method in [HTTPRequest.Method.get, .head] {
            routes.on("/v1/datasets/{dataset}/partitions", method: method) { request, context in
                try await PartitionListRoute.respond(request, context: context, access: access, head: method == .head)
            }
        }
        // Every stream of a partitioned dataset has the read routes of a dataset (docs/partitions.md).
        let streamRoutes = PartitionAccess.routePrefixes.flatMap { p in [(p, HTTPRequest.Method.get), (p, .head)] }
        for (prefix, method) in streamRoutes {
            let base = "/v1/datasets/{dataset}" + prefix
            routes.on("\(base)/manifest", method: method) { request, context in
                try await Self.manifest(request, context: context, access: access, snapshots: snapshots)
            }
            routes.on("\(base)/snapshot", method: method) { request, context in
                try await snapshots.latest(request, context: context)
            }
            routes.on("\(base)/versions/{version}", method: method) { request, context in
                try await snapshots.version(request, context: context)
            }
            routes.on("\(base)/patches/{patch}", method: method) { request, context in
                try await snapshots.patch(request, context: context)
            }
            // Content-addressed objects and the object lookup, for a shared cache (SnapshotResponder+Object.swift).
            routes.on("\(base)/objects/{object}", method: method) { request, context in
                try await snapshots.object(request, context: context)
            }
            routes.on("\(base)/versions/{version}/object", method: method) { request, context in
                try await snapshots.objectLookup(request, context: context, patch: false)
            }
            routes.on("\(base)/patches/{patch}/object", method: method) { request, context in
                try await snapshots.objectLookup(request, context: context, patch: true)
            }
        }
        routes.on("/healthz", method: .get) { _, _ in Self.json(ByteBuffer(string: #"{"status":"ok"}"#)) }
        routes.on("/metrics", method: .get) { _, _ in
            catalog.updateGauges()
            var headers = HTTPFields()
            headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            headers[.cacheControl] = "no-store"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: metrics.render())))
        }
    }

    static func json(_ body: ByteBuffer, headers extra: HTTPFields = [:]) -> Response {
        var headers = extra
        headers[.contentType] = "application/json"
        if headers[.cacheControl] == nil { headers[.cacheControl] = "no-cache" }
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: body))
    }

    static func manifest(
        _ request: Request, context: BasicRequestContext, access: DatasetAccess, snapshots: SnapshotResponder
    ) async throws -> Response {
        let name = try SnapshotResponder.datasetName(context)
        if let wait = WaitPreference(request.headers[.prefer]) {
            return try await ManifestLongPoll.respond(request, dataset: name, access: access, wait: wait)
        }
        return try await snapshots.respond(to: request, context: context) { .manifest }
    }
}
