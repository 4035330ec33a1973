import FerryCore
import FerryPostgres
import Foundation
import Logging
import ServiceLifecycle

/// The fleet: what the server knows of each device of each dataset, kept in PostgreSQL (``FleetTable``) so it
/// outlives a restart and is shared by the servers of one database. Requests never wait for it: they add notes in
/// memory (``DeviceSightings``, under the lock the device count already takes), and this service writes them in one
/// upsert per ``flushInterval`` on a connection of its own, on its pool's thread (never the cooperative pool or an
/// event loop). Reads (``devices(dataset:limit:)``, ``device(_:dataset:)``) write what is pending first, so they
/// see every request answered before them.
///
/// Bounded: at most ``DeviceSightings/noteLimit`` devices wait in memory; in the table, devices unseen for
/// ``retention`` are deleted at each flush, and past ``limit`` devices of a dataset the least recently seen go.
final class DeviceFleet: Service, Sendable {
    let sightings: DeviceSightings
    let pool: PostgresPool
    let retention: Duration
    let limit: Int
    let flushInterval: Duration
    let logger: Logger

    init(
        sightings: DeviceSightings, databaseURL: String, retention: Duration, limit: Int, flushInterval: Duration,
        logger: Logger
    ) {
        self.sightings = sightings
        pool = PostgresPool(url: databaseURL, size: 1)
        self.retention = retention
        self.limit = max(1, limit)
        self.flushInterval = flushInterval
        self.logger = logger
    }

    /// Creates the table and starts gathering notes.
    func start() async throws {
        try await pool.withConnection { pg in try FleetTable.install(on: pg) }
        sightings.collectNotes()
    }

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: self.flushInterval) }
            } catch {
                break
            }
            await flushLogging()
        }
        await flushLogging()
        pool.close()
    }

    /// Closes the connection now (for a server that never started).
    func shutdown() { pool.close() }

    /// Writes the pending notes and prunes; a failure is logged (the notes of that flush are lost, the next ones
    /// are written), and never stops the server.
    func flushLogging() async {
        do {
            try await flush()
        } catch {
            logger.warning("the device fleet could not be written", metadata: ["error": "\(error)"])
        }
    }

    /// Writes the notes gathered so far, then deletes devices past retention (and past the bound, when new devices
    /// came).
    func flush() async throws {
        let (notes, dropped) = sightings.takeNotes()
        if dropped > 0 {
            logger.warning(
                "device notes dropped: too many new devices between two flushes",
                metadata: ["dropped": "\(dropped)"])
        }
        let cutoff = Date().addingTimeInterval(-Double(retention.components.seconds))
        let keep = limit
        _ = try await pool.withConnection { pg -> Int in
            let added = try FleetTable.write(notes, on: pg)
            return try FleetTable.prune(olderThan: cutoff, keep: keep, capped: added > 0, on: pg)
        }
    }

    /// The devices of `dataset` (all datasets when nil), most recently seen first.
    func devices(dataset: String?, limit: Int) async throws -> [DeviceRecord] {
        try await flush()
        return try await pool.withConnection { pg in try FleetTable.list(dataset: dataset, limit: limit, on: pg) }
    }

    /// Device `id` in each dataset (or only `dataset`) it was seen in.
    func device(_ id: String, dataset: String?) async throws -> [DeviceRecord] {
        try await flush()
        return try await pool.withConnection { pg in try FleetTable.device(id, dataset: dataset, on: pg) }
    }
}

extension DeviceFleet {
    /// The fleet of a server with a database (nil without one): its table created, gathering notes.
    static func start(_ configuration: ServerConfiguration, sightings: DeviceSightings, logger: Logger) async throws
        -> DeviceFleet?
    {
        guard let database = configuration.database else { return nil }
        let fleet = DeviceFleet(
            sightings: sightings, databaseURL: database.databaseURL, retention: database.deviceRetention,
            limit: database.deviceLimit, flushInterval: database.fleetFlushInterval, logger: logger)
        do {
            try await fleet.start()
        } catch {
            fleet.shutdown()
            throw error
        }
        return fleet
    }
}

extension FleetRoutes {
    /// The fleet's routes when the server has both a fleet and a status token.
    static func groups(
        _ configuration: ServerConfiguration, fleet: DeviceFleet?, catalog: SnapshotCatalog, wiring: ServerWiring
    ) -> [any ServerRouteGroup] {
        guard let fleet, let token = configuration.statusToken else { return [] }
        return [
            FleetRoutes(
                access: StatusAccess(token: token), fleet: fleet,
                explainer: RowExplainer(catalog: catalog, fleet: fleet, templates: wiring.templates))
        ]
    }
}
