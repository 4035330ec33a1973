import FerryCore

/// The app's own database connections, lent to the client (FerryGRDB's `DatabasePool`): the live database stays
/// open in the app for the whole session, and the client runs its work on the app's writer instead of opening a
/// connection of its own. Updates and rollbacks are then applied in place, in one write transaction each (see
/// ``FerryClient``'s in-place apply), never by renaming a file under open connections.
///
/// The host serializes `write` and `replace` with the app's own writes, and runs them off Swift's cooperative
/// threads (GRDB's writer queue).
///
/// ```swift
/// struct PoolHost: LiveDatabaseHost { … }
/// let client = try await FerryClient.open(configuration: config, logger: logger, host: PoolHost(pool: pool))
/// ```
package protocol LiveDatabaseHost: Sendable {
    /// Runs `body` on the writer inside one write transaction. When `notify` is true, the app's observers learn at
    /// commit that any table may have changed (statements the host did not compile are invisible to it otherwise).
    func write<T: Sendable>(notify: Bool, _ body: @escaping @Sendable (SQLiteConnection) throws -> T) async throws -> T

    /// Runs `body` on the writer outside any transaction (SQLite's backup API needs that), then clears the host's
    /// schema caches and tells its observers that every table changed.
    func replace<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws -> T) async throws -> T
}
