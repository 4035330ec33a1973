import FerryCore
import Foundation
import Logging

/// The client library's entry point: fetches verified snapshots into a client directory and swaps them in,
/// on launch or on request. An app on a phone and an edge device on Linux use the same code.
///
/// The actor runs the client's operations one at a time: two concurrent applies apply once, a check never races
/// another check, and the live database is only used through ``withDatabase(_:)`` so a swap never happens under a
/// running query. The blocking file and SQLite work itself runs on a Dispatch queue, never on Swift's cooperative
/// threads, one operation at a time. One process at a time uses a directory (`DIR/.ferry/lock`).
///
/// ```swift
/// var config = FerryClient.Configuration(directory: appSupport.appendingPathComponent("ferry"))
/// config.serverURL = URL(string: "https://ferry.example.org")!
/// config.dataset = "campgrounds"
/// let client = try await FerryClient.open(configuration: config, logger: logger)   // applies a pending update
/// let names = try await client.withDatabase { db in try db.query("SELECT name FROM campgrounds") }
/// let result = try await client.checkForUpdates()          // offline → FerryError(.offline): keep going
/// if result.outcome == .updateDownloaded { try await client.applyPendingUpdate() }  // or on next launch
/// ```
public actor FerryClient {
    public nonisolated let configuration: Configuration
    /// The client directory's files.
    public nonisolated let directory: ClientDirectory
    /// The request header that carries ``deviceID()``.
    package static let deviceHeader = "Ferry-Device"
    /// `Ferry-Client`: the client's name and version, sent beside `Ferry-Device` (the server's fleet keeps it).
    package static let clientHeader = ("Ferry-Client", "ferry-swift/0.1.0")
    /// ``deviceID()`` once read or made, shared by concurrent first callers (so only one makes it).
    private var deviceIDRead: Task<String, any Error>?
    let logger: Logger
    /// ``Configuration/transport``.
    nonisolated var transport: any HTTPTransport { configuration.transport }
    /// The app's own connections to the live database (FerryGRDB), when it holds them; then the client opens none,
    /// runs its work on the app's writer and applies updates in place.
    let host: (any LiveDatabaseHost)?
    /// With a host: a patch is applied to the live database as it arrives, in place, instead of waiting as
    /// `updated.db` (FerryGRDB's `.automatic`).
    let patchesOnArrival: Bool
    private var lock: FileLock?
    private var connection: LiveDatabase?
    var state: ClientStateFile
    var runningCheck: Task<FetchResult, any Error>?
    var runningPush: Task<PushResult, any Error>?
    /// The push of the edits queued at open (see ``open(configuration:logger:)``); ``close()`` cancels it.
    var launchPush: Task<Void, Never>?
    /// The live database's tables as its snapshot describes them (for the outbox).
    var liveTables: [SnapshotMetadata.TableInfo] = []
    /// The partitions this directory carries (`.ferry/subscriptions.json`), nil for an unpartitioned directory.
    var subscribed: Subscriptions?
    /// True while a file operation runs (see ``exclusively(_:)``); the operations waiting for it, in order.
    private var operationRunning = false
    private var waitingOperations: [CheckedContinuation<Void, Never>] = []

    private init(
        configuration: Configuration, logger: Logger, host: (any LiveDatabaseHost)?, patchesOnArrival: Bool,
        lock: FileLock, state: ClientStateFile
    ) {
        self.configuration = configuration
        self.directory = ClientDirectory(configuration.directory)
        self.logger = logger
        self.host = host
        self.patchesOnArrival = patchesOnArrival
        self.lock = lock
        self.state = state
    }

    /// Opens a client directory "on launch": recovers from any crash, applies a pending update (unless
    /// `configuration.update.applyOnOpen` is false), then opens the live database. Holds the directory's lock until
    /// ``close()``. It never waits on the network: the edits still queued are pushed after it returns (when
    /// `configuration.push.onOpen` is true and a server is set), in a task the client owns and ``close()`` cancels.
    ///
    /// ```swift
    /// let client = try await FerryClient.open(configuration: config, logger: Logger(label: "ferry"))
    /// ```
    public static func open(configuration: Configuration, logger: Logger) async throws -> FerryClient {
        let client = try await open(configuration: configuration, logger: logger, host: nil)
        await client.startLaunchPush()
        return client
    }

    /// Opens a client directory whose live database the app holds open (FerryGRDB's pool): recovers, applies a
    /// pending update in place when `Configuration.update.applyOnOpen` says so, and installs the outbox on the
    /// app's writer. Never pushes: the caller does that in the background.
    package static func open(
        configuration: Configuration, logger: Logger, host: (any LiveDatabaseHost)?, patchesOnArrival: Bool = false
    ) async throws -> FerryClient {
        let directory = ClientDirectory(configuration.directory)
        let (lock, state) = try await BlockingWork.run { try ClientFiles.open(directory, logger: logger) }
        let client = FerryClient(
            configuration: configuration, logger: logger, host: host, patchesOnArrival: patchesOnArrival && host != nil,
            lock: lock, state: state)
        do {
            try await client.launch()
        } catch {
            await client.close()
            throw error
        }
        return client
    }

    private func launch() async throws {
        try await exclusively {
            let apply = configuration.update.applyOnOpen
            let inPlace = host != nil
            let subscriptionsFile = directory.subscriptionsFile
            subscribed = try await BlockingWork.run { try Subscriptions.load(from: subscriptionsFile) }
            try await onFiles { files, state in
                try files.recoverHotJournals()
                if apply, !inPlace, files.directory.exists(files.directory.updated) {
                    files.logger.info(
                        "applying the pending update on launch", metadata: ["dir": "\(files.directory.url.path)"])
                    _ = try files.swapInPendingUpdate(&state)
                }
            }
            if inPlace, directory.exists(directory.updated), try await pendingIsLive() || apply {
                logger.info(
                    "applying the pending update on launch, in place", metadata: ["dir": "\(directory.url.path)"])
                _ = try await applyInPlace()
            }
            try await openConnection()
        }
    }

    /// Whether `updated.db` is the version the live database already holds (a crash inside an in-place apply,
    /// after its commit): then applying it only removes it.
    private func pendingIsLive() async throws -> Bool {
        try await onFiles { files, state in
            let live = try files.directory.info(of: files.directory.database, state: &state)
            let pending = try files.directory.info(of: files.directory.updated, state: &state)
            return live != nil && live?.sha256 == pending?.sha256
        }
    }

    /// This client directory's device id: a random UUID made when the directory first needs one (its first request)
    /// and kept in it (`.ferry/client-id`, written durably), read back ever after. Every request carries it as
    /// `Ferry-Device`, so the server can count the devices on each schema line; it is also the change batches'
    /// `clientId`. It names the directory, not the person: it is not personal data, and a new directory (a
    /// reinstall) gets a new one. Made off the open, whose speed must not depend on an fsync.
    ///
    /// ```swift
    /// logger.info("syncing", metadata: ["device": "\(try await client.deviceID())"])
    /// ```
    public func deviceID() async throws -> String {
        let directory = self.directory
        let read = deviceIDRead ?? Task { try await BlockingWork.run { try directory.deviceID() } }
        deviceIDRead = read
        do {
            return try await read.value
        } catch {
            deviceIDRead = nil  // the next request tries again
            throw error
        }
    }

    /// Closes the live database and releases the directory, after any operation still running; the push started by
    /// the open is cancelled (its edits stay queued). The client must not be used afterwards.
    public func close() async {
        if let push = launchPush {
            launchPush = nil
            push.cancel()
            await push.value
        }
        await exclusively {
            connection = nil
            lock?.unlock()
            lock = nil
        }
    }

    // MARK: One operation at a time

    /// Runs `body` alone among the client's file operations. The actor alone is not enough: while blocking work
    /// runs on the thread pool the actor takes other calls, and an apply must never swap the file under a running
    /// query. Not reentrant: `body` calls the unguarded helpers, never a public method.
    func exclusively<T: Sendable>(_ body: () async throws -> T) async rethrows -> T {
        if operationRunning {
            await withCheckedContinuation { waitingOperations.append($0) }
        } else {
            operationRunning = true
        }
        defer {
            if waitingOperations.isEmpty {
                operationRunning = false
            } else {
                waitingOperations.removeFirst().resume()
            }
        }
        return try await body()
    }

    /// Runs `work` on the thread pool with the directory's files and the checksum cache. The cache's changes are
    /// kept even when `work` throws (a refusal saved before a failing step stays remembered).
    func onFiles<T: Sendable>(_ work: @escaping @Sendable (ClientFiles, inout ClientStateFile) throws -> T) async throws
        -> T
    {
        var scratch = ClientFiles(directory: directory, configuration: configuration, logger: logger)
        scratch.inPlace = host != nil
        let files = scratch
        let before = state
        let (result, after) = try await BlockingWork.run { () -> (Result<T, any Error>, ClientStateFile) in
            var state = before
            let result = Result { try work(files, &state) }
            return (result, state)
        }
        state = after
        return try result.get()
    }

    // MARK: Status

    /// The directory's state with the live and pending versions and checksums. Throws when something it reports
    /// cannot be read (a status never shows a number it did not read).
    ///
    /// ```swift
    /// let status = try await client.status()
    /// ```
    public func status() async throws -> ClientStatus {
        try await exclusively { try await currentStatus() }
    }

    func currentStatus() async throws -> ClientStatus {
        try await onFiles { files, state in try files.status(&state) }
    }

    /// Reads a directory's status without opening a client (no lock, nothing applied): what `ferry status` shows.
    /// Throws when something it reports cannot be read (a status never shows a number it did not read). A
    /// checksum cache that cannot be read or written is reported through `logger` and costs a rehash.
    ///
    /// ```swift
    /// let status = try await FerryClient.status(directory: URL(fileURLWithPath: "/data/ferry"), logger: logger)
    /// ```
    public static func status(directory url: URL, logger: Logger? = nil) async throws -> ClientStatus {
        try await BlockingWork.run { try readStatus(directory: url, logger: logger) }
    }

    private static func readStatus(directory url: URL, logger: Logger?) throws -> ClientStatus {
        let directory = ClientDirectory(url)
        var state = ClientStateFile.load(from: directory.stateFile) { logger?.warning("\($0)") }
        let before = state
        let status = try directory.status(state: &state)
        if state != before, directory.exists(directory.privateDirectory) {
            do {
                try state.save(to: directory.stateFile)
            } catch {
                // Status only reads: a directory it may not write to still has a status; the next call hashes again.
                logger?.notice(
                    "cannot update the checksum cache",
                    metadata: ["path": "\(directory.stateFile.path)", "error": "\(error)"])
            }
        }
        return status
    }

    // MARK: Live database

    /// Runs `body` with the live database, on the thread pool. Reads see local edits at once; writes to writable
    /// tables are recorded in the outbox in the same transaction, writes to read-only tables fail. Apply and rollback
    /// wait until it returns, so the connection never sees a file being swapped. Throws
    /// `FerryError.Code.noDatabase` before the initial sync.
    ///
    /// ```swift
    /// let count = try await client.withDatabase { db in try db.scalar("SELECT count(*) FROM trips")?.integer ?? 0 }
    /// ```
    public func withDatabase<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws -> T) async throws -> T
    {
        try await exclusively { try await useDatabase(body) }
    }

    /// ``withDatabase(_:)`` for code that already runs ``exclusively(_:)``.
    /// With a host, `notify` tells the app's observers that data may have changed (false for reads and for writes
    /// to Ferry's own tables).
    func useDatabase<T: Sendable>(notify: Bool = true, _ body: @escaping @Sendable (SQLiteConnection) throws -> T)
        async throws -> T
    {
        if let host {
            if liveTables.isEmpty { try await openConnection() }
            guard !liveTables.isEmpty else {
                throw FerryError(
                    .noDatabase, "there is no database.db yet: run checkForUpdates() once online for the initial sync",
                    path: directory.database.path)
            }
            return try await host.write(notify: notify, body)
        }
        if connection == nil { try await openConnection() }
        guard let connection else {
            throw FerryError(
                .noDatabase, "there is no database.db yet: run checkForUpdates() once online for the initial sync",
                path: directory.database.path)
        }
        return try await BlockingWork.run { try body(connection.connection) }
    }

    /// Opens database.db (see ``ClientFiles/openLive(_:)``) unless it is open or missing.
    func openConnection() async throws {
        // A stream's file stays as published: nobody writes to it, so it needs no outbox.
        guard configuration.streamPath.isEmpty else { return }
        if let host {
            let files = ClientFiles(directory: directory, configuration: configuration, logger: logger)
            let before = state
            let (tables, after) = try await host.write(notify: false) { writer in
                var state = before
                let tables = try files.prepareLive(writer: writer, &state)
                return (tables, state)
            }
            state = after
            liveTables = tables ?? []
            return
        }
        guard connection == nil, let live = try await onFiles({ files, state in try files.openLive(&state) }) else {
            return
        }
        liveTables = live.tables
        connection = live
    }

    // MARK: Apply and rollback

    /// Applies the pending `updated.db` "on request": waits for ``withDatabase(_:)`` users, closes the connection,
    /// keeps the current file as `previous.db`, renames `updated.db` over `database.db` atomically, reopens.
    /// With nothing pending it changes nothing and says so (`applied == false`).
    ///
    /// ```swift
    /// let result = try await client.applyPendingUpdate()
    /// ```
    @discardableResult
    public func applyPendingUpdate() async throws -> ApplyResult {
        try await exclusively {
            guard directory.exists(directory.updated) else {
                return .nothingPending(status: try await currentStatus())
            }
            let version = try await onFiles { files, state in try files.pendingVersion(&state) }
            let live: SnapshotInfo?
            if host != nil {
                live = try await applyInPlace().live
            } else {
                connection = nil
                live = try await onFiles { files, state in try files.swapInPendingUpdate(&state).live }
                try await openConnection()
            }
            return .applied(version: version, previousVersion: live?.version, status: try await currentStatus())
        }
    }

    /// Puts `previous.db` back as `database.db` when the app finds the new data unusable. The version rolled back is
    /// remembered and not downloaded again; a newer one will be. Throws `FerryError.Code.noPreviousVersion`
    /// when there is nothing to go back to.
    ///
    /// ```swift
    /// try await client.rollback()
    /// ```
    @discardableResult
    public func rollback() async throws -> RollbackResult {
        try await exclusively {
            if host != nil {
                let outcome = try await onWriter(transaction: false) { files, writer, state in
                    try files.rollbackInPlace(writer: writer, &state)
                }
                liveTables = outcome.tables
                return RollbackResult(
                    version: outcome.installed.version, rolledBackVersion: outcome.live?.version,
                    status: try await currentStatus())
            }
            if directory.exists(directory.previous) { connection = nil }
            let (previous, live) = try await onFiles { files, state in try files.rollback(&state) }
            try await openConnection()
            return RollbackResult(
                version: previous.version, rolledBackVersion: live?.version, status: try await currentStatus())
        }
    }
}
