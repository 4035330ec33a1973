import FerryClient
import FerryCore
import Foundation
import GRDB
import Logging

/// An app's Ferry database: a GRDB `DatabasePool` on the client directory's `database.db`, kept current in place.
///
/// The app reads, writes and observes with plain GRDB. Writes to writable tables are local edits: the outbox
/// captures them in the same transaction, keeps them across every update and uploads each exactly once. Updates are
/// applied in place under the open pool, in one write transaction: readers go on reading the version they started
/// with (WAL), and GRDB's observers (`ValueObservation`, `DatabaseRegionObservation`) see the new data after the
/// commit. ``ApplyMode`` says when.
///
/// Opening never waits on the network: crash recovery and (in ``ApplyMode/onLaunch``) the pending update are local,
/// and the launch push runs in the background, in a task the database owns and cancels on ``close()``.
///
/// ```swift
/// let config = FerryClient.Configuration(directory: dir, serverURL: url, dataset: "inspections")
/// let ferry = try await FerryDatabase.open(configuration: config, applyMode: .onRequest)
/// let pool: DatabasePool = ferry.pool
/// let fetched = try await ferry.checkForUpdates()
/// if ferry.currentStatus.state == .updatePending { try await ferry.applyPendingUpdate() }
/// try await ferry.close()
/// ```
public final class FerryDatabase: Sendable {
    /// When a downloaded, verified update is applied to the app's database.
    public enum ApplyMode: String, Sendable, CaseIterable {
        /// At the next ``FerryDatabase/open(configuration:applyMode:logger:databaseConfiguration:)`` (a
        /// new version takes effect when the app starts).
        case onLaunch
        /// When the app calls ``FerryDatabase/applyPendingUpdate()``, for instance from a button; the status says
        /// `SyncState.updatePending` meanwhile (the user decides when the data changes).
        case onRequest
        /// As soon as it is downloaded and verified, in place, while the app runs.
        case automatic
    }

    /// The app's database: `database.db` in WAL mode. Read, write and observe it with GRDB.
    public let pool: DatabasePool
    /// The client underneath, for what this type does not wrap (`FerryClient.rollback()`, `FerryClient.status()`).
    public let client: FerryClient
    /// When updates are applied.
    public let applyMode: ApplyMode
    let broadcast = StatusBroadcast()
    private let background = Locked<Task<Void, Never>?>(nil)
    /// The long-poll loop of ``ApplyMode/automatic`` with `waitForChanges`, started at open, cancelled by ``close()``.
    private let watching = Locked<Task<Void, Never>?>(nil)
    let logger: Logger

    private init(pool: DatabasePool, client: FerryClient, applyMode: ApplyMode, logger: Logger) {
        self.pool = pool
        self.client = client
        self.applyMode = applyMode
        self.logger = logger
    }

    /// Opens the directory: creates it when missing, opens the pool on `database.db` (an empty database before the
    /// initial sync), recovers from a crash, applies a pending update when `applyMode` is ``ApplyMode/onLaunch`` or
    /// ``ApplyMode/automatic``, and returns without touching the network. Queued edits are pushed in the background
    /// when `FerryClient.Configuration.push.onOpen` is true. One `FerryDatabase` per directory: a second open, in
    /// this process or another, throws `FerryError.Code.busy`.
    ///
    /// ```swift
    /// let ferry = try await FerryDatabase.open(configuration: config, applyMode: .automatic)
    /// ```
    ///
    /// `databaseConfiguration` is the pool's GRDB configuration, e.g. with `observesSuspensionNotifications` for a
    /// directory in an App Group container; its busy mode becomes a 5 s timeout when it has none.
    public static func open(
        configuration: FerryClient.Configuration, applyMode: ApplyMode = .onLaunch,
        logger: Logger = Logger(label: "ferry"), databaseConfiguration: GRDB.Configuration = GRDB.Configuration()
    ) async throws -> FerryDatabase {
        let directory = ClientDirectory(configuration.directory)
        var poolConfiguration = databaseConfiguration
        if case .immediateError = poolConfiguration.busyMode { poolConfiguration.busyMode = .timeout(5) }
        let settings = poolConfiguration
        // Creating the directory and opening the pool (which reads the file and may run a WAL recovery) block: they
        // run on the client's blocking-work queue, never on Swift's cooperative threads.
        let pool = try await BlockingWork.run {
            try DurableFile.makeDirectory(directory.url)
            return try DatabasePool(path: directory.database.path, configuration: settings)
        }
        var clientConfiguration = configuration
        clientConfiguration.update.applyOnOpen = applyMode != .onRequest
        let client: FerryClient
        do {
            client = try await FerryClient.open(
                configuration: clientConfiguration, logger: logger, host: PoolHost(pool: pool),
                patchesOnArrival: applyMode == .automatic)
        } catch {
            // The open failed; the pool's close failing too changes nothing for the caller, who gets the first error.
            try? await Self.close(pool)
            throw error
        }
        let database = FerryDatabase(pool: pool, client: client, applyMode: applyMode, logger: logger)
        do {
            try await database.refreshStatus()
        } catch {
            await client.close()
            try? await Self.close(pool)  // as above
            throw error
        }
        if configuration.push.onOpen, configuration.serverURL != nil, configuration.dataset != nil {
            database.startInBackground { database in
                guard database.broadcast.current.queuedEdits > 0 else { return }
                _ = try? await database.push()  // a failure is in the status (lastError); the edits stay queued
            }
        }
        if applyMode == .automatic, configuration.download.waitForChanges != nil, configuration.serverURL != nil,
            configuration.dataset != nil
        {
            database.startWatching()
        }
        return database
    }

    /// Closes the pool and releases the directory, after cancelling the background push and any operation still
    /// running. Status streams end.
    ///
    /// ```swift
    /// try await ferry.close()
    /// ```
    public func close() async throws {
        let watch = watching.withLock { task in
            defer { task = nil }
            return task
        }
        watch?.cancel()
        await watch?.value
        let task = background.withLock { task in
            defer { task = nil }
            return task
        }
        task?.cancel()
        await task?.value
        await client.close()
        broadcast.finish()
        try await Self.close(pool)
    }

    /// Closes `pool` on the client's blocking-work queue (a checkpoint of the WAL may write the file).
    private static func close(_ pool: DatabasePool) async throws {
        try await BlockingWork.run { try pool.close() }
    }

    // MARK: Sync

    /// One check with the server; a new version is downloaded (as a patch when it can be) and verified. In
    /// ``ApplyMode/automatic`` it is applied at once, in place; otherwise it waits as the pending update.
    ///
    /// ```swift
    /// let result = try await ferry.checkForUpdates()
    /// ```
    @discardableResult
    public func checkForUpdates() async throws -> FetchResult {
        let broadcast = self.broadcast
        let result: FetchResult
        do {
            result = try await client.checkForUpdates { progress in
                broadcast.update {
                    $0.download = SyncStatus.Download(
                        bytesReceived: progress.bytesReceived, totalBytes: progress.totalBytes,
                        isPatch: progress.isPatch)
                }
            }
        } catch {
            broadcast.update { $0.download = nil }
            try await fail(error)
        }
        broadcast.update {
            $0.download = nil
            $0.lastCheck = Date()
            $0.lastError = nil
        }
        if applyMode == .automatic, result.status.state == .updatePending {
            try await applyPendingUpdate()
        } else if result.outcome == .initialSync {
            await syncAttachments()
        }
        try await refreshStatus()
        return result
    }

    /// Applies the pending update in place, under the open pool: readers keep the version they started with, and
    /// observers see the new data once it commits. Queued edits are replayed on top. Two concurrent calls apply once.
    ///
    /// ```swift
    /// let applied = try await ferry.applyPendingUpdate()
    /// ```
    @discardableResult
    public func applyPendingUpdate() async throws -> ApplyResult {
        let result = try await reporting { try await $0.applyPendingUpdate() }
        if result.applied { await syncAttachments() }
        return result
    }

    /// Uploads the queued edits; rejected ones are kept for ``rejectedEdits()``.
    ///
    /// ```swift
    /// let pushed = try await ferry.push()
    /// ```
    @discardableResult
    public func push() async throws -> PushResult {
        try await reporting(
            { try await $0.push() },
            succeeded: {
                $0.lastPush = Date()
                $0.lastError = nil
            })
    }

    /// Runs `operation` on the client, then `succeeded` on the status and refreshes it; a failure goes into the
    /// status (`lastError`) and is thrown.
    private func reporting<T: Sendable>(
        _ operation: (FerryClient) async throws -> T, succeeded: (inout SyncStatus) -> Void = { _ in }
    ) async throws -> T {
        do {
            let result = try await operation(client)
            broadcast.update(succeeded)
            try await refreshStatus()
            return result
        } catch {
            try await fail(error)
        }
    }

    /// Push, check, and apply what arrived (whatever the ``ApplyMode``: the app asked for it).
    ///
    /// ```swift
    /// let synced = try await ferry.sync()
    /// ```
    @discardableResult
    public func sync() async throws -> SyncResult {
        let pushed = try await push()
        let fetched = try await checkForUpdates()
        var applied: ApplyResult?
        if broadcast.current.state == .updatePending { applied = try await applyPendingUpdate() }
        return SyncResult(push: pushed, fetch: fetched, apply: applied)
    }

    // MARK: Status

    /// The status now.
    public var currentStatus: SyncStatus { broadcast.current }

    /// The status at once, then after every change, for as long as the caller iterates (any number of subscribers).
    ///
    /// ```swift
    /// for await status in ferry.statusUpdates() { print(status.state, status.queuedEdits) }
    /// ```
    public func statusUpdates() -> AsyncStream<SyncStatus> { broadcast.stream() }

    /// The local edits the server answered `rejected`, `merged` or `gone`, until acknowledged, resubmitted or
    /// discarded; kept across restarts and updates.
    ///
    /// ```swift
    /// let undone = try await ferry.rejectedEdits()
    /// ```
    public func rejectedEdits() async throws -> [RejectedEdit] {
        try await client.rejectedEdits()
    }

    /// Forgets rejected edits the app has shown.
    ///
    /// ```swift
    /// try await ferry.acknowledgeRejectedEdits(undone)
    /// ```
    public func acknowledgeRejectedEdits(_ edits: [RejectedEdit]) async throws {
        try await client.acknowledgeRejectedEdits(edits)
        try await refreshStatus()
    }

    /// Sends a rejected edit again with `values`, on top of the server's row it lost to (that row is the new edit's
    /// base), and forgets the rejected edit, in one transaction; the pool's observers see the new values at once.
    /// The new edit is queued with a new change id and goes up with the next push. Returns that id.
    ///
    /// ```swift
    /// let edit = try await ferry.rejectedEdits()[0]
    /// try await ferry.resubmit(edit, values: ["note": .string("checked twice")])
    /// ```
    @discardableResult
    public func resubmit(_ edit: RejectedEdit, values: [String: JSONValue]) async throws -> String {
        let id = try await client.resubmit(edit, values: values)
        try await refreshStatus()
        return id
    }

    /// Forgets a rejected edit and keeps the server's row, which the pool already shows.
    ///
    /// ```swift
    /// try await ferry.discard(edit)
    /// ```
    public func discard(_ edit: RejectedEdit) async throws {
        try await client.discard(edit)
        try await refreshStatus()
    }

    /// Reads the state, versions and counts again and publishes them. The app's own writes change the queued count:
    /// call this after them when the count is on screen (or observe `ferry_outbox` with GRDB).
    public func refreshStatus() async throws {
        let status = try await client.status()
        let queued = try await client.pendingEdits()
        let rejected = try await client.rejectedEdits().count
        let attachments = try await client.pendingAttachments()
        broadcast.update {
            $0.pendingAttachments = attachments.count
            $0.pendingAttachmentBytes = attachments.reduce(0) { $0 + $1.size }
            $0.state = status.state
            $0.version = status.version
            $0.pendingVersion = status.pendingVersion
            $0.queuedEdits = queued
            $0.rejectedEdits = rejected
        }
    }

    func fail(_ error: any Error) async throws -> Never {
        let ferryError = error as? FerryError ?? FerryError(.io, "\(error)", underlying: error)
        broadcast.update { $0.lastError = ferryError }
        throw error
    }

    /// In ``ApplyMode/automatic`` with `FerryClient.Configuration.download.waitForChanges`: long-polls the server
    /// (``FerryClient/watch(_:)``) and applies each new version in place as it arrives, until ``close()``. A check or
    /// an apply that fails is in the status (`lastError`); the loop goes on, backing off after failed checks, and
    /// ends only when the token is refused or the configuration is wrong.
    private func startWatching() {
        watching.withLock { task in
            task = Task { [self] in
                do {
                    try await client.watch { [self] _ in
                        broadcast.update {
                            $0.lastCheck = Date()
                            $0.lastError = nil
                        }
                        // a failure is in the status (fail sets lastError); the next version retries
                        _ = try? await applyPendingUpdate()
                    }
                } catch {
                    logger.warning("the long-poll for new versions stopped", metadata: ["error": "\(error)"])
                    broadcast.update {
                        $0.lastError = error as? FerryError ?? FerryError(.io, "\(error)", underlying: error)
                    }
                }
            }
        }
    }

    /// Runs `work` in a task this database owns; ``close()`` cancels it and waits for it.
    private func startInBackground(_ work: @escaping @Sendable (FerryDatabase) async -> Void) {
        background.withLock { task in
            task = Task { [self] in await work(self) }
        }
    }
}
