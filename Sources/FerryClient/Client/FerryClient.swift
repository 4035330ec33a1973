import FerryCore
import Foundation
import Logging

/// The client library's entry point: fetches verified snapshots into a client directory and swaps them in,
/// on launch or on request. An app on a phone and an edge device on Linux use the same code.
///
/// The actor serializes everything the book's serial queue did: two concurrent applies apply once, a check never
/// races another check, and the live database is only used through ``withDatabase(_:)`` so a swap never happens
/// under a running query. One process at a time uses a directory (`DIR/.ferry/lock`).
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
    let logger: Logger
    let transport: any SnapshotTransport
    private var lock: FileLock?
    private var connection: SQLiteConnection?
    private var state: ClientStateFile
    private var runningCheck: Task<FetchResult, any Error>?
    var runningPush: Task<PushResult, any Error>?
    /// The live database's tables as its snapshot describes them (for the outbox).
    var liveTables: [SnapshotMetadata.TableInfo] = []

    private init(configuration: Configuration, logger: Logger, transport: any SnapshotTransport) throws {
        self.configuration = configuration
        self.directory = ClientDirectory(configuration.directory)
        self.logger = logger
        self.transport = transport
        try directory.create()
        do {
            lock = try FileLock(path: directory.lockFile.path, wait: false)
        } catch let error as FerryError where error.code == .store {
            throw FerryError(
                .busy, "another process or FerryClient is using this client directory (a fetch still running?); wait for it and try again",
                path: directory.url.path)
        }
        try directory.removeLeftovers()
        state = ClientStateFile.load(from: directory.stateFile) { logger.warning("\($0)") }
    }

    /// Opens a client directory "on launch": recovers from any crash, applies a pending update (unless
    /// ``Configuration/applyPendingOnOpen`` is false), then opens the live database. Holds the directory's lock until
    /// ``close()``.
    ///
    /// ```swift
    /// let client = try await FerryClient.open(configuration: config, logger: Logger(label: "ferry"))
    /// ```
    public static func open(
        configuration: Configuration, logger: Logger, transport: any SnapshotTransport = AsyncHTTPClientTransport()
    ) async throws -> FerryClient {
        let client = try FerryClient(configuration: configuration, logger: logger, transport: transport)
        try await client.launch()
        await client.pushOnLaunch()
        return client
    }

    private func launch() throws {
        // A writer killed mid-transaction leaves a hot journal: let SQLite roll it back before anyone reads
        // (read-only connections cannot).
        for file in [directory.database, directory.updated] where directory.exists(URL(fileURLWithPath: file.path + "-journal")) {
            let db = try SQLiteConnection(path: file.path, mode: .readWrite)
            _ = try db.scalar("SELECT count(*) FROM sqlite_master")
        }
        if configuration.applyPendingOnOpen, directory.exists(directory.updated) {
            logger.info("applying the pending update on launch", metadata: ["dir": "\(directory.url.path)"])
            _ = try swapInPendingUpdate()
        }
        try openConnection()
    }

    /// Closes the live database and releases the directory. The client must not be used afterwards.
    public func close() {
        connection = nil
        lock?.unlock()
        lock = nil
    }

    // MARK: Status

    /// The directory's state with the live and pending versions and checksums.
    ///
    /// ```swift
    /// let status = try await client.status()
    /// ```
    public func status() throws -> ClientStatus {
        let before = state
        let status = try directory.status(state: &state)
        if state != before { saveState("status") }
        return status
    }

    /// Reads a directory's status without opening a client (no lock, nothing applied): what `ferry status` shows.
    /// Throws when something it reports cannot be read (a status never shows a number it did not read). A
    /// checksum cache that cannot be read or written is reported through `logger` and costs a rehash.
    ///
    /// ```swift
    /// let status = try FerryClient.status(directory: URL(fileURLWithPath: "/data/ferry"), logger: logger)
    /// ```
    public static func status(directory url: URL, logger: Logger? = nil) throws -> ClientStatus {
        let directory = ClientDirectory(url)
        var state = ClientStateFile.load(from: directory.stateFile) { logger?.warning("\($0)") }
        let before = state
        let status = try directory.status(state: &state)
        if state != before, directory.exists(directory.privateDirectory) {
            do {
                try state.save(to: directory.stateFile)
            } catch {
                // Status only reads: a directory it may not write to still has a status; the next call hashes again.
                logger?.notice("cannot update the checksum cache", metadata: ["path": "\(directory.stateFile.path)", "error": "\(error)"])
            }
        }
        return status
    }

    // MARK: Live database

    /// Runs `body` with the live database. Reads see local edits at once; writes to writable tables are recorded in
    /// the outbox in the same transaction, writes to read-only tables fail. Apply and rollback wait until it returns,
    /// so the connection never sees a file being swapped. Throws ``FerryError/Code/noDatabase`` before the initial sync.
    ///
    /// ```swift
    /// let count = try await client.withDatabase { db in try db.scalar("SELECT count(*) FROM trips")?.integer ?? 0 }
    /// ```
    public func withDatabase<T: Sendable>(_ body: @Sendable (SQLiteConnection) throws -> T) throws -> T {
        if connection == nil { try openConnection() }
        guard let connection else {
            throw FerryError(
                .noDatabase, "there is no database.db yet: run checkForUpdates() once online for the initial sync",
                path: directory.database.path)
        }
        return try body(connection)
    }

    /// Opens database.db read-write and installs the outbox triggers from its `ferry_tables`, recording the
    /// published checksum inside the file first (local edits change its bytes, not its version).
    private func openConnection() throws {
        guard connection == nil, let live = try directory.info(of: directory.database, state: &state) else { return }
        let db = try SQLiteConnection(path: directory.database.path, mode: .readWrite)
        let tables: [SnapshotMetadata.TableInfo]
        do {
            tables = try SnapshotMetadata.read(from: db).tables
        } catch {
            // Still readable, but without its description no edit can be captured: say so, once per open.
            logger.warning("database.db has no readable snapshot metadata; local edits cannot be captured: \(error)")
            tables = []
        }
        if !tables.isEmpty {
            try OutboxSchema.install(on: db, tables: tables, origin: live.sha256)
            if let identity = FileIdentity.of(directory.database) { state.remember(identity, live) }
            saveState("open")
        }
        liveTables = tables
        connection = db
    }

    // MARK: Fetch

    /// One check with the server: a conditional GET with `If-None-Match` carrying the pending update's checksum if
    /// there is one, else the live database's. 304 changes nothing. Otherwise the snapshot streams into
    /// `.ferry/partial.sqlite` (resuming an interrupted download with `Range` + `If-Range`), is verified, and
    /// becomes `database.db` on the initial sync, else `updated.db`. Concurrent calls share one check.
    /// Errors never touch `database.db`; ``FerryError/Code/offline`` is normal.
    ///
    /// ```swift
    /// let result = try await client.checkForUpdates { p in print("\(p.bytesReceived)/\(p.totalBytes ?? 0)") }
    /// ```
    public func checkForUpdates(progress: (@Sendable (FetchProgress) -> Void)? = nil) async throws -> FetchResult {
        if let runningCheck { return try await runningCheck.value }
        let task = Task { try await self.performCheck(progress: progress) }
        runningCheck = task
        defer { runningCheck = nil }
        return try await task.value
    }

    private func performCheck(progress: (@Sendable (FetchProgress) -> Void)?) async throws -> FetchResult {
        let (url, dataset) = try configuration.snapshotURL()
        if let live = try directory.info(of: directory.database, state: &state), let liveDataset = live.dataset, liveDataset != dataset {
            throw FerryError(
                .badInput, "this directory holds dataset '\(liveDataset)', not '\(dataset)'; use another directory per dataset",
                path: directory.url.path)
        }
        let downloader = SnapshotDownloader(
            directory: directory, transport: transport, snapshotURL: url, dataset: dataset,
            acceptedSchemaVersions: configuration.acceptedSchemaVersions, writeBufferSize: configuration.writeBufferSize,
            maxBytesPerSecond: configuration.maxBytesPerSecond, tokenProvider: configuration.tokenProvider, logger: logger)

        // A download that finished before a crash but was never renamed: verify it from disk and install it first.
        var earlier: FetchResult?
        if let outcome = try await downloader.verifyCompletePartial() {
            earlier = try install(outcome)
        }

        var known: [String] = []
        if let pending = try directory.info(of: directory.updated, state: &state) {
            known.append(pending.sha256)
        } else if let live = try directory.info(of: directory.database, state: &state) {
            known.append(live.sha256)
        }
        known += state.refusedChecksums(accepts: { configuration.acceptedSchemaVersions?.contains($0) ?? true })
        let outcome = try await downloader.download(knownChecksums: known, progress: progress)
        if case .notModified = outcome {
            logger.debug("not modified", metadata: ["dataset": "\(dataset)"])
            directory.discardPartial()
            if let earlier { return earlier }
            saveState("check")
            return FetchResult(outcome: .notModified, bytesReceived: 0, resumedFrom: 0, status: try status())
        }
        return try install(outcome)
    }

    /// Moves a verified partial into place: `database.db` on the initial sync, else `updated.db`.
    private func install(_ outcome: SnapshotDownloader.Outcome) throws -> FetchResult {
        let verified: SnapshotDownloader.Verified
        switch outcome {
        case .notModified:
            return FetchResult(outcome: .notModified, bytesReceived: 0, resumedFrom: 0, status: try status())
        case .refused(let info, let error):
            state.refuse(info, reason: .schema)
            saveState("refusing a schema version")
            throw error
        case .downloaded(let v):
            verified = v
        }
        let info = verified.info
        let live = try directory.info(of: directory.database, state: &state)
        let pending = try directory.info(of: directory.updated, state: &state)
        if info.sha256 == live?.sha256 || info.sha256 == pending?.sha256 {
            directory.discardPartial()
            return FetchResult(
                outcome: .notModified, bytesReceived: verified.bytesReceived, resumedFrom: verified.resumedFrom, status: try status())
        }
        let outcome: FetchResult.Outcome
        let target: URL
        if live == nil && pending == nil {
            outcome = .initialSync
            target = directory.database
        } else {
            outcome = .updateDownloaded
            target = directory.updated
        }
        try DurableFile.rename(directory.partial, to: target)
        if let identity = FileIdentity.of(target) { state.remember(identity, info) }
        // The partial is installed; a record left without it is dropped on the next open (removeLeftovers).
        try? FileManager.default.removeItem(at: directory.partialRecord)
        saveState("install")
        logger.info(
            "\(outcome == .initialSync ? "initial sync" : "update downloaded")",
            metadata: ["version": "\(info.version ?? 0)", "sha256": "\(info.sha256)", "bytes": "\(verified.bytesReceived)"])
        if outcome == .initialSync { try openConnection() }
        return FetchResult(
            outcome: outcome, version: info.version, sha256: info.sha256, bytesReceived: verified.bytesReceived,
            resumedFrom: verified.resumedFrom, status: try status())
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
    public func applyPendingUpdate() throws -> ApplyResult {
        guard directory.exists(directory.updated) else {
            return ApplyResult(
                applied: false, version: try status().version, previousVersion: nil, message: "nothing to apply: no update is pending",
                status: try status())
        }
        let (live, pending) = try swapInPendingUpdate()
        try openConnection()
        let message =
            "applied version \(pending.version.map(String.init) ?? "?")"
            + (live.map { "; version \($0.version.map(String.init) ?? "?") kept as previous.db" } ?? "")
        return ApplyResult(applied: true, version: pending.version, previousVersion: live?.version, message: message, status: try status())
    }

    /// The swap itself; leaves the connection closed. Every prefix of it leaves a complete published database.db.
    private func swapInPendingUpdate() throws -> (live: SnapshotInfo?, pending: SnapshotInfo) {
        guard let pending = try directory.info(of: directory.updated, state: &state) else {
            throw FerryError(.notFound, "no update is pending", path: directory.updated.path)
        }
        let live = try directory.info(of: directory.database, state: &state)
        saveState("apply")
        try closeLiveDatabase()
        try prepare(with: configuration.prepareUpdate, pending: pending)
        for step in ClientDirectory.applyPlan(hasDatabase: live != nil) {
            try directory.perform(step)
        }
        if let live, let identity = FileIdentity.of(directory.previous) { state.remember(identity, live) }
        if let identity = FileIdentity.of(directory.database) { state.remember(identity, pending) }
        saveState("apply")
        logger.info("applied update", metadata: ["version": "\(pending.version ?? 0)", "previous": "\(live?.version ?? 0)"])
        return (live, pending)
    }

    /// Prepares updated.db inside the swap: carries the outbox over from database.db and replays every queued edit
    /// on top of the new data (so a fresh snapshot never hides a pending edit), then runs the app's hook, each in
    /// its own transaction. Idempotent, as a crash before the rename repeats it. The cached checksum stays the
    /// published one.
    private func prepare(with hook: PrepareUpdate?, pending: SnapshotInfo) throws {
        do {
            let updated = try SQLiteConnection(path: directory.updated.path, mode: .readWrite)
            let tables = try SnapshotMetadata.read(from: updated).tables
            try Outbox.carryOver(fromLiveDatabaseAt: directory.database.path, into: updated, tables: tables, origin: pending.sha256)
            if let hook {
                let liveConnection = directory.exists(directory.database) ? try SQLiteConnection(path: directory.database.path, mode: .readOnly) : nil
                // The app's own preparation is not a device edit: it is not queued for upload.
                try updated.transaction {
                    try Outbox.setCapture(false, updated)
                    try hook(updated, liveConnection)
                    try Outbox.setCapture(true, updated)
                }
            }
        }
        try DurableFile.sync(directory.updated)
        if let identity = FileIdentity.of(directory.updated) { state.remember(identity, pending) }
        saveState("apply")
    }

    /// Puts `previous.db` back as `database.db` when the app finds the new data unusable. The version rolled back is
    /// remembered and not downloaded again; a newer one will be. Throws ``FerryError/Code/noPreviousVersion``
    /// when there is nothing to go back to.
    ///
    /// ```swift
    /// try await client.rollback()
    /// ```
    @discardableResult
    public func rollback() throws -> RollbackResult {
        guard let previous = try directory.info(of: directory.previous, state: &state) else {
            throw FerryError(
                .noPreviousVersion, "nothing to roll back to: there is no previous.db (it appears after the first apply)",
                path: directory.previous.path)
        }
        let live = try directory.info(of: directory.database, state: &state)
        if let live, live.sha256 != previous.sha256 { state.refuse(live, reason: .rollback) }
        // The refusal must be on disk before the rollback: without it the next fetch would download the same version.
        try state.save(to: directory.stateFile)
        try closeLiveDatabase()
        try directory.perform(.restorePrevious)
        if let identity = FileIdentity.of(directory.database) { state.remember(identity, previous) }
        saveState("rollback")
        try openConnection()
        logger.info("rolled back", metadata: ["version": "\(previous.version ?? 0)", "from": "\(live?.version ?? 0)"])
        return RollbackResult(version: previous.version, rolledBackVersion: live?.version, status: try status())
    }

    /// Writes the checksum cache (`.ferry/state.json`). It is a cache: the work it records is done and stands, and a
    /// cache that could not be written costs a rehash, so a failure is logged with what was being done, not thrown.
    /// Where the cache carries a refusal that must not be lost, the caller saves with `try` instead.
    private func saveState(_ during: String) {
        do {
            try state.save(to: directory.stateFile)
        } catch {
            logger.warning(
                "cannot write the checksum cache; the next status hashes the files again",
                metadata: ["during": "\(during)", "path": "\(directory.stateFile.path)", "error": "\(error)"])
        }
    }

    /// Closes the live connection and makes sure no SQLite journal belongs to database.db before it is swapped.
    private func closeLiveDatabase() throws {
        connection = nil
        guard !directory.databaseSidecars().isEmpty else { return }
        // A journal left by a writer: let SQLite recover it into database.db before the file changes.
        do {
            let db = try SQLiteConnection(path: directory.database.path, mode: .readWrite)
            _ = try db.scalar("SELECT count(*) FROM sqlite_master")
            if try db.scalar("PRAGMA journal_mode")?.text == "wal" { try db.execute("PRAGMA journal_mode=DELETE") }
        }
        for sidecar in directory.databaseSidecars() where FileIdentity.size(of: sidecar) == 0 {
            // An empty journal that stays is reported just below (busy), with its path.
            try? FileManager.default.removeItem(at: sidecar)
        }
        if let sidecar = directory.databaseSidecars().first {
            throw FerryError(
                .busy, "\(sidecar.lastPathComponent) exists: another program has database.db open for writing; close it and try again",
                path: sidecar.path)
        }
    }
}
