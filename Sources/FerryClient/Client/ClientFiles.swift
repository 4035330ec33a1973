import Dispatch
import FerryCore
import Foundation
import Logging

/// The client's one way off Swift's cooperative threads. Whole-file SHA-256, fsync, renames and copies, and SQLite
/// work on the client's files block the thread they run on; they run on one concurrent Dispatch queue (Dispatch is
/// on every platform the client supports, iOS included, and needs no event loop or thread pool to be started or shut
/// down), never on the cooperative pool, where a blocked thread stalls every task. The caller's task waits on a
/// checked continuation meanwhile; Dispatch adds threads while work items block, and the client's own
/// `exclusively` queue keeps its file operations one at a time, so few ever run at once.
///
/// ```swift
/// let sha256 = try await BlockingWork.run { try FileDigest.sha256Hex(of: file) }
/// ```
package enum BlockingWork {
    /// No QoS of its own: each work item runs at the QoS of the code that asked for it (an open at launch, say).
    private static let queue = DispatchQueue(label: "ferry.client.blocking-work", attributes: .concurrent)

    /// Runs `body` on the client's Dispatch queue and returns (or throws) what it did. FerryGRDB opens and closes
    /// its pool here too.
    package static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }

    /// ``run(_:)`` as a `BlockingLane`, for `VerifiedFileWriter`.
    package static let lane: BlockingLane = { work in try await run(work) }
}

/// The live database's connection and its tables, handed from the thread pool to the client actor.
/// `@unchecked Sendable`: a connection is used by one caller at a time, which ``FerryClient`` guarantees by running
/// its file operations one after another (`exclusively`), never two at once.
struct LiveDatabase: @unchecked Sendable {
    let connection: SQLiteConnection
    /// The tables as the snapshot describes them (empty when it has no readable metadata).
    let tables: [SnapshotMetadata.TableInfo]
}

/// What moving a verified download into place did.
enum Installation: Sendable {
    /// The download was a version the directory already has; nothing moved.
    case alreadyPresent(TransferStats)
    /// The download became `database.db` (`.initialSync`) or `updated.db` (`.updateDownloaded`).
    case installed(FetchResult.Outcome, SnapshotInfo, TransferStats, UpdatePath)
}

/// The blocking half of ``FerryClient``: every operation on the client directory's files, synchronous, run by the
/// actor on the thread pool (``BlockingWork``), one at a time. The checksum cache comes in and goes back out as
/// `inout`; nothing here is shared.
struct ClientFiles: Sendable {
    let directory: ClientDirectory
    let configuration: FerryClient.Configuration
    let logger: Logger
    /// True when the app holds the live database open (``LiveDatabaseHost``): every download, the initial sync's
    /// too, waits as `updated.db` and is applied in place, never renamed over `database.db`.
    var inPlace = false

    // MARK: Open

    /// Checks that SQLite has the session extension, takes the directory (creating it), removes crash leftovers and
    /// loads the checksum cache.
    static func open(_ directory: ClientDirectory, logger: Logger) throws -> (FileLock, ClientStateFile) {
        try SessionExtension.require()
        try directory.create()
        let lock: FileLock
        do {
            lock = try FileLock(path: directory.lockFile.path, wait: false)
        } catch let error as FerryError where error.code == .store {
            throw FerryError(
                .busy,
                "another process or FerryClient is using this client directory (a fetch still running?); wait for it and try again",
                path: directory.url.path)
        }
        try directory.removeLeftovers()
        return (lock, ClientStateFile.load(from: directory.stateFile) { logger.warning("\($0)") })
    }

    /// A writer killed mid-transaction leaves a hot journal: let SQLite roll it back before anyone reads (read-only
    /// connections cannot).
    func recoverHotJournals() throws {
        for file in [directory.database, directory.updated]
        where directory.exists(URL(fileURLWithPath: file.path + "-journal")) {
            let db = try SQLiteConnection(path: file.path, mode: .readWrite)
            _ = try db.scalar("SELECT count(*) FROM sqlite_master")
        }
    }

    /// Opens database.db read-write and installs the outbox triggers from its `ferry_tables`, recording the
    /// published checksum inside the file first (local edits change its bytes, not its version). Nil when there is
    /// no database.db.
    func openLive(_ state: inout ClientStateFile) throws -> LiveDatabase? {
        guard let live = try directory.info(of: directory.database, state: &state) else { return nil }
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
            save(state, during: "open")
        }
        return LiveDatabase(connection: db, tables: tables)
    }

    // MARK: Status

    /// The directory's status; the cache is written when reading refreshed it.
    func status(_ state: inout ClientStateFile) throws -> ClientStatus {
        let before = state
        let status = try directory.status(state: &state)
        if state != before { save(state, during: "status") }
        return status
    }

    /// Writes the checksum cache (`.ferry/state.json`). It is a cache: the work it records is done and stands, and a
    /// cache that could not be written costs a rehash, so a failure is logged with what was being done, not thrown.
    /// Where the cache carries a refusal that must not be lost, the caller saves with `try` instead.
    func save(_ state: ClientStateFile, during: String) {
        do {
            try state.save(to: directory.stateFile)
        } catch {
            logger.warning(
                "cannot write the checksum cache; the next status hashes the files again",
                metadata: ["during": "\(during)", "path": "\(directory.stateFile.path)", "error": "\(error)"])
        }
    }

    // MARK: Fetch

    /// Refuses a directory that holds another dataset (one of the dataset's schema lines is the dataset).
    func checkDataset(_ dataset: String, _ state: inout ClientStateFile) throws {
        if let live = try directory.info(of: directory.database, state: &state), let liveDataset = live.dataset,
            !DatasetName.names(liveDataset, lineOf: dataset, schemaVersion: live.schemaVersion)
        {
            throw FerryError(
                .badInput,
                "this directory holds dataset '\(liveDataset)', not '\(dataset)'; use another directory per dataset",
                path: directory.url.path)
        }
    }

    /// What goes into `If-None-Match`: the pending update's checksum, else the live one's, plus the refused ones.
    func knownChecksums(_ state: inout ClientStateFile) throws -> [String] {
        var known: [String] = []
        if let pending = try directory.info(of: directory.updated, state: &state) {
            known.append(pending.sha256)
        } else if let live = try directory.info(of: directory.database, state: &state) {
            known.append(live.sha256)
        }
        let accepted = configuration.acceptedSchemaVersions
        return known + state.refusedChecksums(accepts: { accepted?.contains($0) ?? true })
    }

    /// The file a patch would start from: `updated.db` when an update is pending (it is the newer), else
    /// `database.db`; nil when neither holds a readable version.
    func patchBase(_ state: inout ClientStateFile) throws -> SnapshotDownloader.PatchBase? {
        for file in [directory.updated, directory.database] {
            guard let info = try directory.info(of: file, state: &state) else { continue }
            guard info.version != nil else { return nil }
            return SnapshotDownloader.PatchBase(
                file: file, info: info, contentDigest: state.arrival(of: info.sha256)?.contentDigest)
        }
        return nil
    }

    /// Copies the patch's base into `.ferry/patched.sqlite`, once the base is checked to still be the version the
    /// patch was chosen for (an apply or rollback may have run while it downloaded).
    func clonePatchBase(_ base: SnapshotDownloader.PatchBase, _ state: inout ClientStateFile) throws -> FileClone.Method
    {
        guard let now = try directory.info(of: base.file, state: &state), now.sha256 == base.info.sha256 else {
            throw FerryError(
                .verification,
                "\(base.file.lastPathComponent) changed while the patch downloaded; taking the full download",
                path: base.file.path)
        }
        if inPlace, base.file == directory.database {
            // The app's database is in WAL mode and open: its file alone may lack committed pages (they are in
            // -wal). SQLite's backup API reads one consistent version through a connection of its own.
            do {
                let live = try SQLiteConnection(path: base.file.path, mode: .readOnly)
                try live.copy(to: directory.patched.path)
            } catch {
                // the error says what went wrong; removed on open too
                try? FileManager.default.removeItem(at: directory.patched)
                throw FerryError(
                    .io,
                    "\(FileClone.patchCopyFailure): \((error as? FerryError)?.message ?? "\(error)"); \(FileClone.patchCopyFix)",
                    path: directory.patched.path, underlying: error)
            }
            return .copy
        }
        return try FileClone.clone(
            base.file, to: directory.patched, FileClone.patchCopyFailure, fix: FileClone.patchCopyFix)
    }

    /// The check found nothing new: the partial is dropped and the cache kept.
    func notModified(_ state: inout ClientStateFile) {
        directory.discardPartial()
        save(state, during: "check")
    }

    /// Moves a verified partial into place: `database.db` on the initial sync, else `updated.db`. A refused schema
    /// version is remembered (so it is not downloaded again) and its error thrown.
    func install(_ outcome: SnapshotDownloader.Outcome, _ state: inout ClientStateFile) throws -> Installation {
        let verified: SnapshotDownloader.Verified
        switch outcome {
        case .notModified:
            return .alreadyPresent(TransferStats())
        case .refused(let info, let error):
            state.refuse(info, reason: .schema)
            save(state, during: "refusing a schema version")
            throw error
        case .downloaded(let v):
            verified = v
        case .patch:
            // FerryClient applies a patch (into a verified file) before it installs anything.
            throw FerryError(
                .verification, "a patch reached the install step unapplied; nothing was changed",
                path: directory.patched.path)
        }
        let info = verified.info
        let live = try directory.info(of: directory.database, state: &state)
        let pending = try directory.info(of: directory.updated, state: &state)
        if info.sha256 == live?.sha256 || info.sha256 == pending?.sha256 {
            if verified.file == directory.partial {
                directory.discardPartial()
            } else {
                // A patched copy left behind is scratch: the next open removes it (removeLeftovers).
                try? FileManager.default.removeItem(at: verified.file)
            }
            return .alreadyPresent(verified.stats)
        }
        let outcome: FetchResult.Outcome
        let target: URL
        if live == nil && pending == nil {
            outcome = .initialSync
            target = inPlace ? directory.updated : directory.database
        } else if !configuration.streamPath.isEmpty {
            // A stream's file is read only by the composition, never held open: the verified file replaces it at once.
            outcome = .updateDownloaded
            target = directory.database
        } else {
            outcome = .updateDownloaded
            target = directory.updated
        }
        try DurableFile.rename(verified.file, to: target)
        if let identity = FileIdentity.of(target) { state.remember(identity, info) }
        state.arrived(
            info.sha256, by: verified.path, contentDigest: verified.contentDigest,
            ownRowsSettled: verified.ownRowsSettled)
        if verified.file == directory.partial {
            // The partial is installed; a record (or compressed prefix) left without it is dropped on the next open
            // (removeLeftovers).
            try? FileManager.default.removeItem(at: directory.partialGzip)
            try? FileManager.default.removeItem(at: directory.partialRecord)  // as above
        }
        save(state, during: "install")
        logger.info(
            "\(outcome == .initialSync ? "initial sync" : "update downloaded")",
            metadata: [
                "version": "\(info.version ?? 0)", "sha256": "\(info.sha256)",
                "bytes": "\(verified.stats.bytesReceived)",
                "encoding": "\(verified.stats.encoding?.rawValue ?? "-")", "path": "\(verified.path)",
            ])
        return .installed(outcome, info, verified.stats, verified.path)
    }

    // MARK: Apply and rollback

    /// The version `updated.db` holds; a file that names none (no readable `ferry_snapshot` row) is refused before
    /// anything moves.
    func pendingVersion(_ state: inout ClientStateFile) throws -> Int {
        guard let version = try directory.info(of: directory.updated, state: &state)?.version else {
            throw FerryError(
                .verification,
                "the pending update is not a Ferry snapshot (no readable ferry_snapshot row); delete updated.db and fetch again",
                path: directory.updated.path)
        }
        return version
    }

    /// The swap itself, with the live connection closed by the caller. Every prefix of it leaves a complete
    /// published database.db.
    func swapInPendingUpdate(_ state: inout ClientStateFile) throws -> (live: SnapshotInfo?, pending: SnapshotInfo) {
        guard let pending = try directory.info(of: directory.updated, state: &state) else {
            throw FerryError(.notFound, "no update is pending", path: directory.updated.path)
        }
        let live = try directory.info(of: directory.database, state: &state)
        save(state, during: "apply")
        try settleLiveJournal()
        try prepare(pending: pending, &state)
        for step in ClientDirectory.applyPlan(hasDatabase: live != nil) {
            try directory.perform(step)
        }
        if let live, let identity = FileIdentity.of(directory.previous) { state.remember(identity, live) }
        if let identity = FileIdentity.of(directory.database) { state.remember(identity, pending) }
        save(state, during: "apply")
        logger.info(
            "applied update", metadata: ["version": "\(pending.version ?? 0)", "previous": "\(live?.version ?? 0)"])
        return (live, pending)
    }

    /// Prepares updated.db inside the swap: carries the outbox over from database.db and replays every queued edit
    /// on top of the new data (so a fresh snapshot never hides a pending edit), then runs the app's hook, each in
    /// its own transaction. Idempotent, as a crash before the rename repeats it. The cached checksum stays the
    /// published one.
    func prepare(pending: SnapshotInfo, _ state: inout ClientStateFile) throws {
        do {
            let updated = try SQLiteConnection(path: directory.updated.path, mode: .readWrite)
            let tables = try SnapshotMetadata.read(from: updated).tables
            try Outbox.carryOver(
                fromLiveDatabaseAt: directory.database.path, into: updated, tables: tables, origin: pending.sha256)
            if let hook = configuration.update.prepare {
                let liveConnection =
                    directory.exists(directory.database)
                    ? try SQLiteConnection(path: directory.database.path, mode: .readOnly) : nil
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
        save(state, during: "apply")
    }

    /// Puts `previous.db` back as `database.db` (the live connection closed by the caller); the version rolled back
    /// is refused from now on. Returns the restored and the rolled-back version's info.
    func rollback(_ state: inout ClientStateFile) throws -> (previous: SnapshotInfo, live: SnapshotInfo?) {
        let (previous, live) = try refuseLiveForRollback(&state)
        try settleLiveJournal()
        try directory.perform(.restorePrevious)
        if let identity = FileIdentity.of(directory.database) { state.remember(identity, previous) }
        save(state, during: "rollback")
        logger.info("rolled back", metadata: ["version": "\(previous.version ?? 0)", "from": "\(live?.version ?? 0)"])
        return (previous, live)
    }

    /// The first step of either rollback (by rename or in place): `previous.db`'s version and the live one, the live
    /// version refused from now on, and that refusal saved before anything changes (without it the next fetch would
    /// download the same version again). Throws ``FerryError/Code/noPreviousVersion`` when there is no previous.db.
    func refuseLiveForRollback(_ state: inout ClientStateFile) throws -> (previous: SnapshotInfo, live: SnapshotInfo?) {
        guard let previous = try directory.info(of: directory.previous, state: &state) else {
            throw FerryError(
                .noPreviousVersion,
                "nothing to roll back to: there is no previous.db (it appears after the first apply)",
                path: directory.previous.path)
        }
        let live = try directory.info(of: directory.database, state: &state)
        if let live, live.sha256 != previous.sha256 { state.refuse(live, reason: .rollback) }
        try state.save(to: directory.stateFile)
        return (previous, live)
    }

    /// Makes sure no SQLite journal belongs to database.db before it is swapped (the live connection is closed).
    private func settleLiveJournal() throws {
        guard !directory.databaseSidecars().isEmpty else { return }
        // A journal left by a writer: let SQLite recover it into database.db before the file changes.
        do {
            let db = try SQLiteConnection(path: directory.database.path, mode: .readWrite)
            _ = try db.scalar("SELECT count(*) FROM sqlite_master")
            if try db.scalar("PRAGMA journal_mode")?.text == "wal" { try db.execute("PRAGMA journal_mode=DELETE") }
            try removeUnsyncedJournal(db)
        }
        for sidecar in directory.databaseSidecars() where FileIdentity.size(of: sidecar) == 0 {
            // An empty journal that stays is reported just below (busy), with its path.
            try? FileManager.default.removeItem(at: sidecar)
        }
        if let sidecar = directory.databaseSidecars().first {
            throw FerryError(
                .busy,
                "\(sidecar.lastPathComponent) exists: another program has database.db open for writing; close it and try again",
                path: sidecar.path)
        }
    }

    /// Removes a rollback journal SQLite does not call hot, one whose header is still zero: a writer killed before
    /// its first journal sync, so before it changed a page of database.db (SQLite writes the header's magic only
    /// when it syncs the journal, and leaves such a file in place). Left there, it would look like a writer forever.
    /// Done holding the write lock (`BEGIN IMMEDIATE`), so no writer can be using it; a writer that holds the lock
    /// keeps its journal (busy).
    private func removeUnsyncedJournal(_ db: SQLiteConnection) throws {
        let journal = URL(fileURLWithPath: directory.database.path + "-journal")
        guard FileIdentity.size(of: journal) ?? 0 > 0 else { return }
        do {
            try db.execute("BEGIN IMMEDIATE")
        } catch {
            return  // another writer holds the lock: its journal stays, and the caller reports it (busy)
        }
        defer {
            // Ends a transaction that wrote nothing: it cannot lose data.
            try? db.execute("ROLLBACK")
        }
        let handle = try FileHandle(forReadingFrom: journal)
        // A read-only handle: closing it cannot lose data.
        defer { try? handle.close() }
        if let first = try handle.read(upToCount: 1)?.first, first == 0 {
            try FileManager.default.removeItem(at: journal)
        }
    }
}
