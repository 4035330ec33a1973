import FerryCore
import Foundation

/// Builds the next version from the live database and a row-level patch (docs/delta.md): a clone of
/// `database.db`, the patch applied inside one transaction with change capture off, the snapshot's own
/// description (`ferry_snapshot`, `ferry_origin`) moved to the new version, then verified. The caller leaves the
/// result as `updated.db` exactly as a verified download; anything that fails leaves no file behind.
///
/// Conflicts (a row that differs from what the publisher expected) mean one of two things:
/// - the device has local edits (a queue, or rows edited since the snapshot): the server's new row wins (the queue
///   is replayed on top when the update is applied, as after a full download), and a row deleted locally stays
///   deleted;
/// - the device has none: the file diverged from the version it claims. That is an error, and the caller takes
///   the full download instead; a patch never produces a wrong database.
///
/// ```swift
/// try PatchApplier.build(live: directory.database, into: scratch, patch: changeset, expected: manifest.current)
/// ```
enum PatchApplier {
    /// What an apply did.
    struct Outcome: Sendable, Equatable {
        /// Whether the copy was a clone or a plain copy.
        var copy: FileClone.Method
        /// Conflicts settled in favour of the server's row (devices with local edits only).
        var conflictsResolved: Int
        /// Whether the device had local edits (then row counts and the content digest are not checked).
        var hadLocalEdits: Bool
        /// Whether the result was rebuilt with `VACUUM` (see ``vacuumFreeRatio``).
        var vacuumed = false
        /// How the content digest was checked: moved from the base's, read in full, or not at all (local edits, or
        /// a version that records none).
        var digestCheck: DigestCheck = .none
    }

    enum DigestCheck: String, Sendable { case moved, full, none }

    /// A patched database whose free pages reach this share of its pages is rebuilt with `VACUUM` before it becomes
    /// `updated.db`: the pages a patch frees are reused by later patches, so the file stays compact, and one that
    /// fragmented past this point costs one rebuild on the device, never a full download.
    static let vacuumFreeRatio = 0.25

    /// Clones `live` into `target` and applies `patch` to the clone (see ``apply(to:copy:patch:expected:baseDigest:)``).
    static func build(live: URL, into target: URL, patch: Changeset, expected: PublishedVersion, baseDigest: String? = nil) throws -> Outcome {
        let method: FileClone.Method
        do {
            try patch.validate()
            method = try FileClone.clone(live, to: target, FileClone.patchCopyFailure, fix: FileClone.patchCopyFix)
        } catch {
            try? FileManager.default.removeItem(at: target)  // the original error says what went wrong
            throw error
        }
        return try apply(to: target, copy: method, patch: patch, expected: expected, baseDigest: baseDigest)
    }

    /// Applies `patch` to `target`, a fresh copy of the device's database, and checks the result against
    /// `expected`. With the base version's content digest (`baseDigest`), the result's digest is moved by the rows
    /// the patch touches (one lookup each, before and after); without it the patched tables are read in full.
    /// Anything that fails removes `target` and throws.
    static func apply(
        to target: URL, copy method: FileClone.Method, patch: Changeset, expected: PublishedVersion, baseDigest: String? = nil
    ) throws -> Outcome {
        do {
            return try applyOrThrow(to: target, copy: method, patch: patch, expected: expected, baseDigest: baseDigest)
        } catch {
            // The half-built file must not survive; the original error says what went wrong.
            try? FileManager.default.removeItem(at: target)
            try? FileManager.default.removeItem(atPath: target.path + "-journal")  // as above; also removed on the next open
            throw error
        }
    }

    private static func applyOrThrow(
        to target: URL, copy method: FileClone.Method, patch: Changeset, expected: PublishedVersion, baseDigest: String?
    ) throws -> Outcome {
        try patch.validate()
        var resolved = 0
        var hadLocalEdits = false
        var vacuumed = false
        var moved: ContentDigest?
        do {
            let db = try SQLiteConnection(path: target.path, mode: .readWrite)
            // The copy is scratch until it is verified, fsynced and renamed: a crash or a failure deletes it, so it
            // needs no rollback journal and no syncs of its own (a journal of the ~16 % of pages a 1 % change touches
            // would be written and fsynced for nothing). One fsync at the end makes it durable.
            try db.execute("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF")
            hadLocalEdits = try localEditsExist(db)
            let (touched, base) = try digestPlan(patch, expected: expected, baseDigest: baseDigest, hadLocalEdits: hadLocalEdits)
            var digest = base
            try db.transaction {
                if try tableExists("ferry_capture", db) { try Outbox.setCapture(false, db) }
                resolved = try applyRows(patch, to: db, expected: expected, lenient: hadLocalEdits, touched: touched, digest: &digest)
                if try tableExists("ferry_capture", db) { try Outbox.setCapture(true, db) }
            }
            moved = digest
            if !hadLocalEdits {
                try verifyContent(db, expected: expected, movedDigest: moved, file: target)
            }
            let pages = try db.scalar("PRAGMA page_count")?.integer ?? 0
            let free = try db.scalar("PRAGMA freelist_count")?.integer ?? 0
            if pages > 0, Double(free) >= Double(pages) * vacuumFreeRatio {
                try db.execute("VACUUM")
                vacuumed = true
            }
        }
        try DurableFile.sync(target)
        let check: DigestCheck = hadLocalEdits || expected.contentDigest == nil ? .none : (moved != nil ? .moved : .full)
        return Outcome(copy: method, conflictsResolved: resolved, hadLocalEdits: hadLocalEdits, vacuumed: vacuumed, digestCheck: check)
    }

    /// Applies `patch` to the live database itself, on the app's writer inside its write transaction (FerryGRDB):
    /// the same conflict rules and checks as on a copy, then every queued edit replayed on top (as the swap's
    /// carry-over does). Anything that fails throws before the transaction commits, so the caller's rollback leaves
    /// the live database as it was. Readers of the app's pool see the old version until the commit (WAL).
    static func applyInPlace(
        on db: SQLiteConnection, patch: Changeset, expected: PublishedVersion, baseDigest: String?, tables: [SnapshotMetadata.TableInfo]
    ) throws -> Outcome {
        try patch.validate()
        var resolved = 0
        let hadLocalEdits = try localEditsExist(db)
        let (touched, base) = try digestPlan(patch, expected: expected, baseDigest: baseDigest, hadLocalEdits: hadLocalEdits)
        var moved = base
        try db.transaction {
            if try tableExists("ferry_capture", db) { try Outbox.setCapture(false, db) }
            resolved = try applyRows(patch, to: db, expected: expected, lenient: hadLocalEdits, touched: touched, digest: &moved)
            if !hadLocalEdits {
                try verifyContent(db, expected: expected, movedDigest: moved, file: URL(fileURLWithPath: db.path))
            } else {
                try Outbox.replayQueued(in: db, tables: tables)
            }
            if try tableExists("ferry_capture", db) { try Outbox.setCapture(true, db) }
        }
        let check: DigestCheck = hadLocalEdits || expected.contentDigest == nil ? .none : (moved != nil ? .moved : .full)
        return Outcome(copy: .clone, conflictsResolved: resolved, hadLocalEdits: hadLocalEdits, digestCheck: check)
    }

    /// Whether the database holds local edits: queued ones, or rows edited since the snapshot (`ferry_base`).
    private static func localEditsExist(_ db: SQLiteConnection) throws -> Bool {
        guard try tableExists("ferry_outbox", db) else { return false }
        return (try db.scalar("SELECT (SELECT count(*) FROM ferry_outbox) + (SELECT count(*) FROM ferry_base)")?.integer ?? 0) > 0
    }

    /// The rows whose digest moves and the base's digest to move, when the digest can be moved row by row (no local
    /// edits, and both versions record one); else no rows and nil.
    private static func digestPlan(
        _ patch: Changeset, expected: PublishedVersion, baseDigest: String?, hadLocalEdits: Bool
    ) throws -> ([String: Changeset.TouchedRows], ContentDigest?) {
        guard !hadLocalEdits, expected.contentDigest != nil, let base = baseDigest.flatMap(ContentDigest.init(hex:)) else { return ([:], nil) }
        return (try patch.touchedRows().filter { expected.tables[$0.key] != nil }, base)
    }

    /// Inside the caller's transaction, capture off: the digest moved around the patch (the base's, minus the touched
    /// rows before, plus them after), the patch applied (`lenient`: the server's row wins a conflict, a row deleted
    /// locally stays deleted; otherwise a conflict aborts), and the snapshot's description moved to `expected`, with
    /// the version it holds named in `ferry_origin` (its bytes are not the published ones). Returns the conflicts
    /// settled.
    private static func applyRows(
        _ patch: Changeset, to db: SQLiteConnection, expected: PublishedVersion, lenient: Bool, touched: [String: Changeset.TouchedRows],
        digest: inout ContentDigest?
    ) throws -> Int {
        var resolved = 0
        if digest != nil { digest!.subtract(try ContentDigest.of(touched, in: db)) }
        try patch.apply(to: db) { conflict in
            guard lenient else { return .abort }
            resolved += 1
            return conflict.kind == .notFound ? .omit : .replace
        }
        if digest != nil { digest!.add(try ContentDigest.of(touched, in: db)) }
        let counts = try SnapshotMetadata.json(expected.tables)
        let updated = try db.run(
            "UPDATE ferry_snapshot SET version = ?, schemaVersion = ?, createdAt = ?, tables = ?",
            [.integer(Int64(expected.version)), .integer(Int64(expected.schemaVersion)), .text(expected.createdAt), .text(counts)])
        guard updated == 1 else {
            throw FerryError(.verification, "the database has \(updated) ferry_snapshot rows, not one; it is not a Ferry snapshot", path: db.path)
        }
        try db.execute("CREATE TABLE IF NOT EXISTS ferry_origin(sha256 TEXT NOT NULL); DELETE FROM ferry_origin;")
        try db.run("INSERT INTO ferry_origin(sha256) VALUES (?)", [.text(expected.sha256)])
        return resolved
    }

    /// On a device without local edits the patched rows must be exactly the published ones: the row counts, then the
    /// content digest (when the version records one), moved from the base's or computed in full.
    private static func verifyContent(_ db: SQLiteConnection, expected: PublishedVersion, movedDigest: ContentDigest?, file: URL) throws {
        for (table, rows) in expected.tables.sorted(by: { $0.key < $1.key }) {
            let count = try db.scalar("SELECT count(*) FROM \(SQLIdentifier.quote(table))")?.integer ?? -1
            guard count == Int64(rows) else {
                throw FerryError(
                    .verification, "after the patch, table '\(table)' has \(count) rows but version \(expected.version) has \(rows)",
                    path: file.path)
            }
        }
        guard let published = expected.contentDigest else { return }
        let digest = try movedDigest ?? ContentDigest.compute(db, tables: Array(expected.tables.keys))
        guard digest.description == published else {
            throw FerryError(
                .verification,
                "after the patch, the rows' content digest is \(digest) but version \(expected.version) has \(published): the database diverged from the version it claims",
                path: file.path)
        }
    }

    static func tableExists(_ name: String, _ db: SQLiteConnection) throws -> Bool {
        try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", [.text(name)])?.integer == 1
    }
}

extension FileClone {
    /// How a failed copy of the database for a patch is reported.
    static let patchCopyFailure = "cannot copy the database for the patch"
    static let patchCopyFix = "free space and fetch again (database.db and any pending update are unchanged)"
}
