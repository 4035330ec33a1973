import FerryCore
import FerryPostgres
import Foundation
import Logging
import ServiceLifecycle

/// The template's `scope.token` query as a ``ScopeAuthority``: `$1` is the token's SHA-256 hex, the first column of
/// the answer is the scope value in PostgreSQL's text form (the form the publisher names scopes by). No row, or a
/// NULL, means "not authorised"; rows naming several different scopes are refused too (with a warning), since the
/// token's scope would be ambiguous.
///
/// It is a `Service`: run it in the server's `ServiceGroup` so its connections close on shutdown.
///
/// ```swift
/// let authority = try await PostgresScopeAuthority.start(template: template, databaseURL: url, logger: logger)
/// let app = try await buildApplication(configuration, logger: logger, scopeAuthorities: [template.dataset: authority])
/// ```
public final class PostgresScopeAuthority: ScopeAuthority, Service {
    public let dataset: String
    let sql: String
    let pool: PostgresPool
    let logger: Logger

    /// True for a partitioned dataset's `partition.access` query: a token maps to a set of keys.
    let partitioned: Bool

    init(dataset: String, sql: String, pool: PostgresPool, logger: Logger, partitioned: Bool = false) {
        self.dataset = dataset
        self.sql = sql
        self.pool = pool
        self.logger = logger
        self.partitioned = partitioned
    }

    /// Connects and checks the template's scope queries against PostgreSQL (errors name the template and key).
    public static func start(template: Template, databaseURL: String, connections: Int = 2, logger: Logger) async throws
        -> PostgresScopeAuthority
    {
        guard template.scope != nil || template.partition?.access != nil else {
            throw FerryError(
                .badTemplate,
                "dataset '\(template.dataset)' has no `scope:` section or `partition.access` query, so it needs no token check",
                path: template.path, key: "scope")
        }
        let pool = PostgresPool(url: databaseURL, size: connections)
        do {
            _ = try await pool.withConnection { pg in try template.scopeTypeName(using: pg) }
        } catch {
            pool.close()
            throw error
        }
        if let access = template.partition?.access {
            logger.info("partition access check ready", metadata: ["dataset": "\(template.dataset)"])
            return PostgresScopeAuthority(
                dataset: template.dataset, sql: access, pool: pool, logger: logger, partitioned: true)
        }
        guard let sql = template.scope?.token else {
            pool.close()
            throw FerryError(
                .badTemplate, "dataset '\(template.dataset)' takes its scope from a JWT claim, not a token query",
                path: template.path, key: "scope.claim")
        }
        logger.info("token check ready", metadata: ["dataset": "\(template.dataset)"])
        return PostgresScopeAuthority(dataset: template.dataset, sql: sql, pool: pool, logger: logger)
    }

    public func scope(forTokenSHA256 hash: String) async throws -> String? {
        let sql = self.sql
        let rows = try await pool.withConnection { pg in try pg.run(sql, [hash]) }
        let scopes = Set(rows.compactMap { $0.first ?? nil })
        // A partitioned dataset's token reads a set of partitions: its keys, one per line (``PartitionAccess``).
        if partitioned { return scopes.isEmpty ? nil : PartitionAccess.encode(scopes) }
        if scopes.count > 1 {
            logger.warning(
                "a token maps to several scopes; refusing it (fix the scope.token query)",
                metadata: ["dataset": "\(dataset)"])
            return nil
        }
        return scopes.first
    }

    /// Waits for graceful shutdown, then closes the connections.
    public func run() async throws {
        // Throws only when the task is cancelled; either way the connections close next.
        try? await gracefulShutdown()
        pool.close()
    }

    /// Closes the connections now (for use without a ServiceGroup).
    public func shutdown() { pool.close() }

    /// What the token check's connections last saw of PostgreSQL (for the status page).
    var connectionHealth: PostgresPool.Health { pool.health }
}
