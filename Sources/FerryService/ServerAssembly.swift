import FerryBucket
import FerryCore
import FerryJWT
import FerryPublisher
import FerryServer
import Foundation
import Logging
import NIOPosix
import ServiceLifecycle
import UnixSignals

/// A whole Ferry server built from one ``ServeConfiguration``: the bucket replica (for a store in a bucket), the HTTP
/// application with its catalog, changes endpoint, status page, long-polls and retention, and the in-process
/// publish schedules. `ferry serve` is this plus flag parsing.
///
/// ```swift
/// let assembly = try await ServerAssembly.start(configuration, logger: logger) { url in print("listening on \(url)") }
/// try await assembly.run(gracefulShutdownSignals: [.sigterm, .sigint])
/// ```
public struct ServerAssembly: Sendable {
    /// The services in start order; a `ServiceGroup` stops them in reverse: the schedules first, then the HTTP
    /// server drains, then the replica stops polling.
    let services: [any Service]
    let drainTimeout: Duration
    let logger: Logger
    /// The temp directory an in-process bucket publisher builds in, removed when ``run(gracefulShutdownSignals:)``
    /// ends.
    let publisherCache: URL?

    /// Starts what must be ready before anything listens (a bucket's first sync, the mergers' connections, the
    /// catalog's first read) and builds the rest. Nothing listens until ``run(gracefulShutdownSignals:)``.
    ///
    /// - Parameter onListening: called with the server's URL (`http://HOST:PORT`) once it is bound.
    /// - Throws: `FerryError` naming the setting to fix (an unreadable template, a missing store, a bucket that
    ///   cannot be read); whatever was started is stopped again.
    public static func start(
        _ configuration: ServeConfiguration, logger: Logger,
        onListening: @escaping @Sendable (_ url: String) async -> Void = { _ in }
    ) async throws -> ServerAssembly {
        var server = configuration.server
        // JWT signatures are checked by FerryJWT (vapor/jwt-kit) unless the caller brought its own reader.
        if server.database?.jwt != nil, server.database?.jwt?.readKeys == nil {
            server.database?.jwt?.readKeys = JWKSDocument.keys
        }
        var cleanup = Cleanup()
        do {
            let (schedules, publisherCache) = try makeSchedules(configuration, server: &server, logger: logger)
            cleanup.publisherCache = publisherCache
            var services: [any Service] = []
            if case .bucket = configuration.store {
                let replica = try await startReplica(configuration, server: &server, logger: logger)
                cleanup.replica = replica
                services.append(replica)
            } else if !schedules.isEmpty {
                // This process publishes into the directory: make it, so the server starts on an empty store.
                let storePath = server.storePath
                try await NIOThreadPool.singleton.runIfActive { try DurableFile.makeDirectory(storePath) }
            }
            let (scheme, host) = (server.scheme, server.host)
            services.append(
                try await buildApplication(server, logger: logger) { port in
                    await onListening("\(scheme)://\(host):\(port)")
                })
            return ServerAssembly(
                services: services + schedules, drainTimeout: server.drainTimeout, logger: logger,
                publisherCache: publisherCache)
        } catch {
            await cleanup.run()
            throw error
        }
    }

    /// Runs every service until one of `gracefulShutdownSignals` arrives (or the task is cancelled), then stops them:
    /// schedules first (a running publish finishes), then the server drains downloads for up to
    /// ``ServerConfiguration/drainTimeout``. A drain cut short is logged, not thrown.
    public func run(gracefulShutdownSignals: [UnixSignal] = []) async throws {
        var group = ServiceGroupConfiguration(services: services, logger: logger)
        group.gracefulShutdownSignals = gracefulShutdownSignals
        group.maximumGracefulShutdownDuration = drainTimeout
        // Past this, ServiceLifecycle ends the process (fatalError): bounded, but far above what a loaded 2-core
        // machine needs to cancel a drained server (2 s crashed the whole test process under CI's load).
        group.maximumCancellationDuration = .seconds(30)
        do {
            try await ServiceGroup(configuration: group).run()
        } catch let error as ServiceGroupError {
            logger.warning("stopped without draining every download: \(error)")
        } catch {
            await Cleanup(publisherCache: publisherCache).run()
            throw error
        }
        await Cleanup(publisherCache: publisherCache).run()
    }

    /// The publish schedules of ``ServeConfiguration/publishing``, each reporting to the status page and, for a
    /// store directory, telling the catalog at once (``StoreChanges``); and the temp directory a bucket publisher
    /// builds in.
    static func makeSchedules(
        _ configuration: ServeConfiguration, server: inout ServerConfiguration, logger: Logger
    ) throws -> ([any Service], URL?) {
        guard let publishing = configuration.publishing else { return ([], nil) }
        guard let database = server.database else {
            throw FerryError(
                .badInput, "publishing in-process needs the templates and the database URL", key: "database")
        }
        var settings = PublishSettings(store: configuration.store, databaseURL: database.databaseURL)
        settings.policy = publishing.policy
        settings.s3Endpoint = configuration.bucket.endpoint
        var publisherCache: URL?
        if case .bucket = configuration.store {
            // A temp directory: what a failed removal leaves, the OS cleans.
            let cache = (configuration.bucket.cacheParent ?? FileManager.default.temporaryDirectory)
                .appendingPathComponent("ferry-publisher-cache-\(UUID().uuidString)", isDirectory: true)
            settings.cacheDirectory = cache
            publisherCache = cache
        }
        let publishers = try settings.publishers(templatePaths: database.templatePaths.map(\.path), logger: logger)
        // A publish into the store directory is served at once, not at the catalog's next poll (a bucket's replica
        // finds it at its next manifest poll, as any other publisher's).
        let storeChanges: StoreChanges? = publisherCache == nil ? StoreChanges() : nil
        server.dependencies.storeChanges = storeChanges
        let statusBoard = server.dependencies.statusBoard
        let schedules = publishing.trigger.schedules(for: publishers, logger: logger) { dataset, outcome in
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
        return (schedules, publisherCache)
    }

    /// A bucket store's replica, after its first sync (which fails, naming the setting, before anything listens);
    /// the server then reads the replica's store from its cache.
    static func startReplica(
        _ configuration: ServeConfiguration, server: inout ServerConfiguration, logger: Logger
    ) async throws -> BucketReplica {
        let replica = try BucketReplica.fromEnvironment(
            location: configuration.store, endpoint: configuration.bucket.endpoint,
            cacheParent: configuration.bucket.cacheParent, pollInterval: configuration.bucket.manifestPoll,
            logger: logger)
        do {
            try await replica.start()
        } catch {
            // Best effort: the cache is a temp directory, and the start's own error is the one to report.
            try? await NIOThreadPool.singleton.runIfActive { replica.removeCache() }
            throw error
        }
        server.dependencies.store = replica.store
        server.dependencies.storeName = "\(configuration.store)"
        server.storePath = replica.store.cacheDirectory
        // Whole files built on request and catch-up patches go beside the replica's objects, unless named.
        if server.builds.directory == nil {
            server.builds.directory = replica.store.cacheDirectory.appendingPathComponent(".ferry-cache")
        }
        server.dependencies.attachmentStore = replica.attachments
        // Partial uploads on the cache's file system, so a finished one moves into the cache by a rename.
        server.dependencies.attachmentUploads = replica.store.cacheDirectory.appendingPathComponent(".ferry-uploads")
        if configuration.bucket.presignObjects {
            server.dependencies.objectURL = { dataset, object in replica.objectURL(dataset: dataset, object: object) }
        }
        return replica
    }

    /// What a failed start, or the end of a run, leaves to remove.
    struct Cleanup {
        var publisherCache: URL?
        var replica: BucketReplica?

        /// Removes them off the cooperative pool (a cache holds whole snapshot files).
        func run() async {
            let (publisherCache, replica) = (self.publisherCache, self.replica)
            // Best effort: a pool already shut down removes nothing, and both are temp directories.
            try? await NIOThreadPool.singleton.runIfActive {
                replica?.removeCache()
                // A temp directory: what a failed removal leaves, the OS cleans.
                if let publisherCache { try? FileManager.default.removeItem(at: publisherCache) }
            }
        }
    }
}
