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
    /// ``deviceID()`` once read or made, shared by concurrent first callers (so only one makes it).
    private var deviceIDRead: Task<String, any Error>?
    let logger: Logger
    let transport: any SnapshotTransport
    /// The app's own connections to the live database (FerryGRDB), when it holds them; then the client opens none,
    /// runs its work on the app's writer and applies updates in place.
    let host: (any LiveDatabaseHost)?
    /// With a host: a patch is applied to the live database as it arrives, in place, instead of waiting as
    /// `updated.db` (FerryGRDB's `.automatic`).
    let patchesOnArrival: Bool
    private var lock: FileLock?
    private var connection: LiveDatabase?
    private var state: ClientStateFile
    private var runningCheck: Task<FetchResult, any Error>?
    var runningPush: Task<PushResult, any Error>?
    /// The push of the edits queued at open (see ``open(configuration:logger:transport:)``); ``close()`` cancels it.
    var launchPush: Task<Void, Never>?
    /// The live database's tables as its snapshot describes them (for the outbox).
    var liveTables: [SnapshotMetadata.TableInfo] = []
    /// True while a file operation runs (see ``exclusively(_:)``); the operations waiting for it, in order.
    private var operationRunning = false
    private var waitingOperations: [CheckedContinuation<Void, Never>] = []

    private init(
        configuration: Configuration, logger: Logger, transport: any SnapshotTransport, host: (any LiveDatabaseHost)?,
        patchesOnArrival: Bool,
        lock: FileLock, state: ClientStateFile
    ) {
        self.configuration = configuration
        self.directory = ClientDirectory(configuration.directory)
        self.logger = logger
        self.transport = transport
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
    public static func open(
        configuration: Configuration, logger: Logger, transport: any SnapshotTransport = URLSessionTransport.shared
    ) async throws -> FerryClient {
        let client = try await open(configuration: configuration, logger: logger, transport: transport, host: nil)
        await client.startLaunchPush()
        return client
    }

    /// Opens a client directory whose live database the app holds open (FerryGRDB's pool): recovers, applies a
    /// pending update in place when `Configuration.update.applyOnOpen` says so, and installs the outbox on the
    /// app's writer. Never pushes: the caller does that in the background.
    package static func open(
        configuration: Configuration, logger: Logger, transport: any SnapshotTransport, host: (any LiveDatabaseHost)?,
        patchesOnArrival: Bool = false
    ) async throws -> FerryClient {
        let directory = ClientDirectory(configuration.directory)
        let (lock, state) = try await BlockingWork.run { try ClientFiles.open(directory, logger: logger) }
        let client = FerryClient(
            configuration: configuration, logger: logger, transport: transport, host: host,
            patchesOnArrival: patchesOnArrival && host != nil,
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

    private func currentStatus() async throws -> ClientStatus {
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
    private func openConnection() async throws {
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

    // MARK: Fetch

    /// One check with the server: the manifest is revalidated with `If-None-Match` carrying the pending update's
    /// checksum if there is one, else the live database's. 304 changes nothing and moves no snapshot byte.
    /// Otherwise the version it names is downloaded from its immutable URL (`…/versions/{n}`), compressed when the
    /// server has a gzip copy, inflated into `.ferry/partial.sqlite` as it arrives (resuming an interrupted download
    /// with `Range` + `If-Range`), verified against its SHA-256, and becomes `database.db` on the initial sync, else
    /// `updated.db`. Concurrent calls share one check.
    /// Errors never touch `database.db`; `FerryError.Code.offline` is normal.
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

    /// ``checkForUpdates(progress:)`` whose work is cancelled with the calling task: ending ``watch(_:)`` must not
    /// wait out a long-poll. (A plain check goes on when its caller is cancelled, for the other callers it serves.)
    func checkForUpdatesCancellingWithCaller() async throws -> FetchResult {
        if let runningCheck { return try await runningCheck.value }
        let task = Task { try await self.performCheck(progress: nil) }
        runningCheck = task
        defer { runningCheck = nil }
        return try await Self.value(of: task)
    }

    /// The value of `task`, which is cancelled when the calling task is.
    static func value<T: Sendable>(of task: Task<T, any Error>) async throws -> T {
        try await withTaskCancellationHandler {
            try await task.value
        } onCancel: {
            task.cancel()
        }
    }

    /// The download itself runs outside ``exclusively(_:)``: the app keeps reading and writing database.db meanwhile.
    private func performCheck(progress: (@Sendable (FetchProgress) -> Void)?) async throws -> FetchResult {
        let downloader = try await makeDownloader()
        let dataset = downloader.dataset

        let usePatches = configuration.download.usePatches
        let (earlier, known, base) = try await exclusively {
            () async throws -> (FetchResult?, [String], SnapshotDownloader.PatchBase?) in
            try await onFiles { files, state in try files.checkDataset(dataset, &state) }
            // A download that finished before a crash but was never renamed: verify it from disk and install it first.
            var earlier: FetchResult?
            if let outcome = try await downloader.verifyCompletePartial() {
                earlier = try await install(outcome)
            }
            let (known, base) = try await onFiles { files, state in
                (try files.knownChecksums(&state), usePatches ? try files.patchBase(&state) : nil)
            }
            return (earlier, known, base)
        }
        var outcome = try await downloader.check(knownChecksums: known, patchBase: base, progress: progress)
        if case .patch(let patch) = outcome {
            do {
                if let applied = try await patchInPlace(patch) { return applied }
                outcome = .downloaded(try await build(patch))
            } catch let error as FerryError where error.code != .offline && !FerryError.isOutOfSpace(error) {
                // A full disk is reported as it is: the full download needs at least the space the copy did.
                logger.warning(
                    "the patch did not apply; taking the full download",
                    metadata: ["from": "\(patch.ref.from)", "to": "\(patch.ref.to)", "error": "\(error.message)"])
                downloader.patchFailure.withLock { $0 = error.message }
                outcome = try await downloader.check(knownChecksums: known, patchBase: nil, progress: progress)
            }
        }
        let patchFailure = downloader.patchFailure.withLock { $0 }
        let result = try await exclusively {
            if case .notModified = outcome {
                logger.debug("not modified", metadata: ["dataset": "\(dataset)"])
                try await onFiles { files, state in files.notModified(&state) }
                if let earlier { return earlier }
                return FetchResult.notModified(.init(status: try await currentStatus()))
            }
            return try await install(outcome)
        }
        let pacing = downloader.manifestPacing.withLock { $0 }
        return result.with(patchFailure: patchFailure, waitApplied: pacing.waitApplied, retryAfter: pacing.retryAfter)
    }

    /// Builds the next version from a downloaded patch: a copy of the base taken while no other operation runs
    /// (so it holds committed data), the patch applied to the copy off the actor, then checked (see
    /// ``PatchApplier``). The app keeps using database.db meanwhile; edits it makes are in the outbox, which the
    /// apply replays on top as after a full download.
    private func build(_ patch: SnapshotDownloader.DownloadedPatch) async throws -> SnapshotDownloader.Verified {
        let scratch = directory.patched
        let method = try await exclusively {
            try await onFiles { files, state in try files.clonePatchBase(patch.base, &state) }
        }
        let started = ContinuousClock.now
        let applied = try await BlockingWork.run {
            try PatchApplier.apply(
                to: scratch, copy: method, patch: patch.changeset, expected: patch.target,
                baseDigest: patch.base.contentDigest)
        }
        logger.info(
            "patch applied",
            metadata: [
                "from": "\(patch.ref.from)", "to": "\(patch.ref.to)", "bytes": "\(patch.bytesReceived)",
                "copy": "\(applied.copy.rawValue)",
                "ownRows": "\(applied.ownRowsSettled)", "vacuumed": "\(applied.vacuumed)",
                "digest": "\(applied.digestCheck.rawValue)",
                "seconds": "\((ContinuousClock.now - started).components.seconds)",
            ])
        let target = patch.target
        let info = SnapshotInfo(
            sha256: target.sha256, version: target.version, schemaVersion: target.schemaVersion,
            dataset: patch.base.info.dataset)
        var stats = TransferStats(
            bytesReceived: patch.bytesReceived, resumedFrom: 0, fileBytes: FileIdentity.size(of: scratch),
            encoding: .gzip)
        stats.publishedBytes = target.size
        return SnapshotDownloader.Verified(
            info: info, stats: stats, file: scratch, path: .patch(from: patch.ref.from, to: patch.ref.to),
            contentDigest: target.contentDigest,
            ownRowsSettled: applied.ownRowsSettled)
    }

    /// Moves a verified partial into place (see ``ClientFiles/install(_:_:)``) and opens it after the initial sync.
    func install(_ outcome: SnapshotDownloader.Outcome) async throws -> FetchResult {
        switch try await onFiles({ files, state in try files.install(outcome, &state) }) {
        case .alreadyPresent(let stats):
            return .notModified(
                .init(
                    status: try await currentStatus(), bytesReceived: stats.bytesReceived,
                    resumedFrom: stats.resumedFrom))
        case .installed(let outcome, let info, let stats, let path):
            if outcome == .initialSync, host != nil {
                _ = try await applyInPlace()
            }
            if outcome == .initialSync { try await openConnection() }
            let status = try await currentStatus()
            let fileBytes = stats.fileBytes ?? FileIdentity.size(of: directory.database) ?? 0
            let download = FetchResult.Download(
                version: info.version ?? 0, sha256: info.sha256, bytesReceived: stats.bytesReceived,
                resumedFrom: stats.resumedFrom, fileBytes: fileBytes, publishedBytes: stats.publishedBytes ?? fileBytes,
                encoding: stats.encoding ?? .identity, path: path,
                ownRowsSettled: path == .full ? nil : status.ownRowsSettled, status: status)
            return outcome == .initialSync ? .initialSync(download) : .updateDownloaded(download)
        }
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
            let (live, pending): (SnapshotInfo?, SnapshotInfo)
            if host != nil {
                let outcome = try await applyInPlace()
                (live, pending) = (outcome.live, outcome.installed)
            } else {
                connection = nil
                (live, pending) = try await onFiles { files, state in try files.swapInPendingUpdate(&state) }
                try await openConnection()
            }
            return .applied(
                version: pending.version, previousVersion: live?.version, status: try await currentStatus())
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

    // MARK: In place (a host holds the live database)

    /// Applies `updated.db` in place on the host's writer (see ``ClientFiles/applyInPlace(writer:_:)``).
    private func applyInPlace() async throws -> InPlaceOutcome {
        let outcome = try await onWriter(transaction: false) { files, writer, state in
            try files.applyInPlace(writer: writer, &state)
        }
        liveTables = outcome.tables
        return outcome
    }

    /// Applies a downloaded patch to the live database as it arrives (``patchesOnArrival``): the live version is
    /// kept as `previous.db`, then the patch is applied and verified inside one write transaction on the host's
    /// writer, queued edits replayed on top. Nil when this client does not apply patches in place. What fails
    /// leaves the live database as it was (the transaction rolls back) and is thrown: the caller takes the full
    /// download.
    private func patchInPlace(_ patch: SnapshotDownloader.DownloadedPatch) async throws -> FetchResult? {
        guard patchesOnArrival, patch.base.file == directory.database else { return nil }
        return try await exclusively {
            let started = ContinuousClock.now
            let base = patch.base.info
            try await onWriter(transaction: false) { files, writer, state in
                try files.keepLiveForPatch(writer: writer, base: base, &state)
            }
            let tables = liveTables
            let (info, applied) = try await onWriter(transaction: true) { files, writer, state in
                try files.applyPatchInPlace(writer: writer, patch: patch, tables: tables, &state)
            }
            try await onFiles { files, state in files.save(state, during: "apply") }
            logger.info(
                "patch applied in place",
                metadata: [
                    "from": "\(patch.ref.from)", "to": "\(patch.ref.to)", "bytes": "\(patch.bytesReceived)",
                    "ownRows": "\(applied.ownRowsSettled)", "digest": "\(applied.digestCheck.rawValue)",
                    "seconds": "\((ContinuousClock.now - started).components.seconds)",
                ])
            return .updateDownloaded(
                .init(
                    version: info.version ?? patch.ref.to, sha256: info.sha256, bytesReceived: patch.bytesReceived,
                    resumedFrom: 0, fileBytes: FileIdentity.size(of: directory.database) ?? patch.target.size,
                    publishedBytes: patch.target.size, encoding: .gzip,
                    path: .patch(from: patch.ref.from, to: patch.ref.to), ownRowsSettled: applied.ownRowsSettled,
                    status: try await currentStatus()))
        }
    }

    /// Runs `work` on the host's writer, in one write transaction or outside any (SQLite's backup API needs that),
    /// with the directory's files and the checksum cache (kept even when `work` throws, as in ``onFiles(_:)``).
    private func onWriter<T: Sendable>(
        transaction: Bool,
        _ work: @escaping @Sendable (ClientFiles, SQLiteConnection, inout ClientStateFile) throws -> T
    ) async throws -> T {
        guard let host else { throw FerryError(.badInput, "an in-place apply needs the app's database (FerryGRDB)") }
        var scratch = ClientFiles(directory: directory, configuration: configuration, logger: logger)
        scratch.inPlace = true
        let files = scratch
        // The cache comes back even when `work` throws; a throw inside a transaction also makes the host roll it back.
        let box = Locked(state)
        let body: @Sendable (SQLiteConnection) throws -> T = { writer in
            var state = box.current
            defer { box.withLock { [state] in $0 = state } }
            return try work(files, writer, &state)
        }
        do {
            let result = transaction ? try await host.write(notify: true, body) : try await host.replace(body)
            state = box.current
            return result
        } catch {
            state = box.current
            throw error
        }
    }
}
