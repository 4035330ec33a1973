import FerryCore
import Foundation
import Logging

/// What an in-place apply or rollback did.
struct InPlaceOutcome: Sendable {
    /// The version the live database held before, nil on the initial sync.
    var live: SnapshotInfo?
    /// The version it holds now.
    var installed: SnapshotInfo
    /// The live database's tables as its snapshot describes them.
    var tables: [SnapshotMetadata.TableInfo]
}

extension ClientFiles {
    /// Applies the verified `updated.db` to the live database in place, on the app's writer (``LiveDatabaseHost``),
    /// while the app's connections stay open:
    /// 1. the outbox travels into `updated.db` and every queued edit is replayed on top, as in the swap
    ///    (``Outbox/carryOver(fromLiveDatabaseAt:into:tables:origin:)``), then the app's `prepareUpdate` hook;
    /// 2. the current version is copied to `previous.db` (a consistent copy, then fsync and rename);
    /// 3. `updated.db` replaces the live contents with SQLite's backup API: one write transaction, so readers go on
    ///    reading the version they started with and a crash part way leaves the previous version;
    /// 4. `updated.db` is removed.
    /// The writer is held throughout, so no app write can fall between reading the queue and replacing the data.
    func applyInPlace(writer: SQLiteConnection, _ state: inout ClientStateFile) throws -> InPlaceOutcome {
        guard let pending = try directory.info(of: directory.updated, state: &state) else {
            throw FerryError(.notFound, "no update is pending", path: directory.updated.path)
        }
        let live = try directory.info(of: directory.database, state: &state)
        if let live, live.sha256 == pending.sha256 {
            // A crash after step 3 and before step 4: the update is in already, and the live queue is the newer one.
            try DurableFile.remove(directory.updated)
            return InPlaceOutcome(live: live, installed: live, tables: try SnapshotMetadata.read(from: writer).tables)
        }
        try prepare(pending: pending, &state)
        if let live {
            try keepAsPrevious(writer, info: live, &state)
        }
        try forgetLive(&state)
        do {
            let source = try SQLiteConnection(path: directory.updated.path, mode: .readOnly)
            try writer.replaceContents(from: source)
        }
        try DurableFile.remove(directory.updated)
        let tables = try SnapshotMetadata.read(from: writer).tables
        rememberLive(pending, &state)
        logger.info(
            "applied update in place",
            metadata: ["version": "\(pending.version ?? 0)", "previous": "\(live?.version ?? 0)"])
        return InPlaceOutcome(live: live, installed: pending, tables: tables)
    }

    /// Puts `previous.db` back in place, on the app's writer: the queue travels into a copy of it (no queued edit
    /// is lost by a rollback), the copy replaces the live contents in one write transaction, and the version rolled
    /// back is remembered so it is not downloaded again.
    func rollbackInPlace(writer: SQLiteConnection, _ state: inout ClientStateFile) throws -> InPlaceOutcome {
        let (previous, live) = try refuseLiveForRollback(&state)
        let scratch = directory.previousLink
        try? FileManager.default.removeItem(at: scratch)  // garbage of an earlier crash, if any; the copy overwrites it
        try FileClone.clone(
            directory.previous, to: scratch, "cannot copy previous.db for the rollback", fix: "free space and try again"
        )
        defer { try? FileManager.default.removeItem(at: scratch) }  // scratch: removeLeftovers also drops it
        try forgetLive(&state)
        do {
            let copy = try SQLiteConnection(path: scratch.path, mode: .readWrite)
            let tables = try SnapshotMetadata.read(from: copy).tables
            try Outbox.carryOver(
                fromLiveDatabaseAt: directory.database.path, into: copy, tables: tables, origin: previous.sha256)
            try writer.replaceContents(from: copy)
        }
        try DurableFile.remove(directory.previous)
        let tables = try SnapshotMetadata.read(from: writer).tables
        rememberLive(previous, &state)
        logger.info(
            "rolled back in place", metadata: ["version": "\(previous.version ?? 0)", "from": "\(live?.version ?? 0)"])
        return InPlaceOutcome(live: live, installed: previous, tables: tables)
    }

    /// Installs the outbox on the app's live database (tables from its snapshot, the published checksum kept
    /// inside), once per open. Nil tables when the directory has no database yet.
    func prepareLive(writer: SQLiteConnection, _ state: inout ClientStateFile) throws -> [SnapshotMetadata.TableInfo]? {
        guard let live = try directory.info(of: directory.database, state: &state) else { return nil }
        let tables: [SnapshotMetadata.TableInfo]
        do {
            tables = try SnapshotMetadata.read(from: writer).tables
        } catch {
            logger.warning("database.db has no readable snapshot metadata; local edits cannot be captured: \(error)")
            return []
        }
        if !tables.isEmpty {
            try OutboxSchema.install(on: writer, tables: tables, origin: live.sha256)
            rememberLive(live, &state)
        }
        return tables
    }

    /// Keeps the live version as `previous.db` before a patch is applied to it in place; throws when the live
    /// database is no longer the patch's base (an apply or rollback ran while it downloaded).
    func keepLiveForPatch(writer: SQLiteConnection, base: SnapshotInfo, _ state: inout ClientStateFile) throws {
        guard let live = try directory.info(of: directory.database, state: &state), live.sha256 == base.sha256 else {
            throw FerryError(
                .verification, "database.db changed while the patch downloaded; taking the full download",
                path: directory.database.path)
        }
        try keepAsPrevious(writer, info: live, &state)
    }

    /// Applies a downloaded patch to the live database inside the host's write transaction (see
    /// ``PatchApplier/applyInPlace(on:patch:expected:baseDigest:tables:)``), and records the new version.
    func applyPatchInPlace(
        writer: SQLiteConnection, patch: SnapshotDownloader.DownloadedPatch, tables: [SnapshotMetadata.TableInfo],
        _ state: inout ClientStateFile
    ) throws -> (SnapshotInfo, PatchApplier.Outcome) {
        try forgetLive(&state)
        let outcome = try PatchApplier.applyInPlace(
            on: writer, patch: patch.changeset, expected: patch.target, baseDigest: patch.base.contentDigest,
            tables: tables, rule: patch.rule)
        let target = patch.target
        let info = SnapshotInfo(
            sha256: target.sha256, version: target.version, schemaVersion: target.schemaVersion,
            dataset: patch.base.info.dataset)
        state.arrived(
            info.sha256, by: .patch(from: patch.ref.from, to: patch.ref.to), contentDigest: target.contentDigest,
            ownRowsSettled: outcome.ownRowsSettled)
        // Not saved here: the transaction commits after this returns; the caller saves once it has.
        if let identity = FileIdentity.of(directory.database) { state.remember(identity, info) }
        return (info, outcome)
    }

    /// A consistent copy of the live database (the writer is held) becomes `previous.db`, durably.
    ///
    /// The cheap way first: a `TRUNCATE` checkpoint puts every committed page into `database.db` itself, and while
    /// the writer is held nothing else can write it, so the file is cloned as it is (APFS `clonefile` on iOS and
    /// macOS, the kernel's `sendfile` on Linux) and switched out of WAL mode. Readers of the app's pool do not block
    /// that checkpoint for long (no write runs, so they all read the newest version); when one does, the copy goes
    /// through SQLite's backup API instead, which reads a consistent version whatever the WAL holds.
    private func keepAsPrevious(_ writer: SQLiteConnection, info: SnapshotInfo, _ state: inout ClientStateFile) throws {
        let scratch = directory.previousLink
        try? FileManager.default.removeItem(at: scratch)  // garbage of an earlier crash, if any; the copy overwrites it
        do {
            let cloned = try Self.checkpointFully(writer)
            logger.debug(
                "keeping the live version as previous.db",
                metadata: ["copy": "\(cloned ? "clone of the checkpointed file" : "SQLite backup")"])
            if cloned {
                try FileClone.clone(
                    directory.database, to: scratch, "cannot copy database.db as previous.db",
                    fix: "free space and try again", durable: false)
                let copy = try SQLiteConnection(path: scratch.path, mode: .readWrite)
                if try copy.scalar("PRAGMA journal_mode")?.text == "wal" {
                    try copy.execute("PRAGMA journal_mode=DELETE")
                }
            } else {
                try writer.copy(to: scratch.path)
            }
            try DurableFile.sync(scratch)
            try DurableFile.rename(scratch, to: directory.previous)
        } catch {
            try? FileManager.default.removeItem(at: scratch)  // the error above says what went wrong
            throw error
        }
        if let identity = FileIdentity.of(directory.previous) { state.remember(identity, info) }
    }

    /// Runs a `TRUNCATE` checkpoint on the writer (outside any transaction): true when it completed, so the database
    /// file alone holds every committed page and the WAL is empty. False when a reader kept it from completing, or
    /// the database is not in WAL mode (then the file may be mid-change under a rollback journal: not cloned).
    static func checkpointFully(_ writer: SQLiteConnection) throws -> Bool {
        guard !writer.isInsideTransaction, try writer.scalar("PRAGMA journal_mode")?.text == "wal" else { return false }
        guard let row = try writer.query("PRAGMA wal_checkpoint(TRUNCATE)").first, row.count == 3 else { return false }
        return row[0].integer == 0 && row[1].integer == 0
    }

    /// The live database is about to change version in place, perhaps without changing its inode, size or mtime
    /// (WAL): its cached version is dropped on disk first, so that a crash before the new one is saved makes the next
    /// status read the version from the database itself.
    private func forgetLive(_ state: inout ClientStateFile) throws {
        guard let identity = try FileIdentity.read(directory.database) else { return }
        state.forget(inode: identity.inode)
        try state.save(to: directory.stateFile)
    }

    /// The live database changed version without changing its inode (WAL): the cache learns the new version under
    /// its current identity, and the state is saved.
    private func rememberLive(_ info: SnapshotInfo, _ state: inout ClientStateFile) {
        if let identity = FileIdentity.of(directory.database) { state.remember(identity, info) }
        save(state, during: "apply")
    }
}
