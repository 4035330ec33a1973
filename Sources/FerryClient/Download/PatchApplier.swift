import FerryCore
import Foundation

/// Builds the next version from the live database and a row-level patch (docs/delta.md): a clone of
/// `database.db`, the patch applied inside one transaction with change capture off, the snapshot's own
/// description (`ferry_snapshot`, `ferry_origin`) moved to the new version, then verified. The caller leaves the
/// result as `updated.db` exactly as a verified download; anything that fails leaves no file behind.
///
/// The rows the device wrote itself since the version it holds (queued edits, and pushed ones the server answered)
/// are first put back as that version published them (``Outbox/restoreWrittenRows(in:tables:)``). The patch then
/// applies to exactly its base, so a conflict (a row that differs from what the publisher expected) means the file
/// diverged from the version it claims: an error, and the caller takes the full download. A patch never produces a
/// wrong database, and the result is checked as strictly with local edits as without: row counts and the content
/// digest. The queued edits are replayed on top afterwards (at the swap, or here when applied in place).
///
/// ```swift
/// try PatchApplier.build(live: directory.database, into: scratch, patch: changeset, expected: manifest.current)
/// ```
enum PatchApplier {
    /// What an apply did.
    struct Outcome: Sendable, Equatable {
        /// Whether the copy was a clone or a plain copy.
        var copy: FileClone.Method
        /// Rows the device wrote itself since the base version, put back as published before the patch applied.
        var ownRowsSettled: Int
        /// Whether the result was rebuilt with `VACUUM` (see ``vacuumFreeRatio``).
        var vacuumed = false
        /// How the content digest was checked: moved from the base's, read in full, or not at all (a version that
        /// records none).
        var digestCheck: DigestCheck = .none
    }

    enum DigestCheck: String, Sendable { case moved, full, none }

    /// How the patch's changes meet the database's rows.
    enum Rule: Sendable {
        /// The database is exactly the patch's base: any conflict means it diverged, and the apply aborts.
        case strict
        /// A catch-up patch, merged from the newest point of the history at or before the device's version
        /// (docs/delta.md, "Catching up"): a change meeting a row the device already holds as of a later version is
        /// written over it, a delete of a row it no longer holds is skipped. A constraint failure still aborts, and
        /// the result is verified as strictly as after any patch (row counts, content digest), so a device whose
        /// version the patch cannot bring up to date falls back to the full download, never to a wrong file.
        case catchUp

        func resolve(_ conflict: Changeset.Conflict) -> Changeset.Resolution {
            switch (self, conflict.kind) {
            case (.catchUp, .data), (.catchUp, .conflict): .replace
            case (.catchUp, .notFound): .omit
            default: .abort
            }
        }
    }

    /// A patched database whose free pages reach this share of its pages is rebuilt with `VACUUM` before it becomes
    /// `updated.db`: the pages a patch frees are reused by later patches, so the file stays compact, and one that
    /// fragmented past this point costs one rebuild on the device, never a full download.
    static let vacuumFreeRatio = 0.25

    /// Clones `live` into `target` and applies `patch` to the clone (see
    /// ``apply(to:copy:patch:expected:baseDigest:)``).
    static func build(
        live: URL, into target: URL, patch: Changeset, expected: PublishedVersion, baseDigest: String? = nil,
        rule: Rule = .strict
    ) throws -> Outcome {
        let method: FileClone.Method
        do {
            try patch.validate()
            method = try FileClone.clone(live, to: target, FileClone.patchCopyFailure, fix: FileClone.patchCopyFix)
        } catch {
            try? FileManager.default.removeItem(at: target)  // the original error says what went wrong
            throw error
        }
        return try apply(
            to: target, copy: method, patch: patch, expected: expected, baseDigest: baseDigest, rule: rule)
    }

    /// Applies `patch` to `target`, a fresh copy of the device's database, and checks the result against
    /// `expected`. With the base version's content digest (`baseDigest`), the result's digest is moved by the rows
    /// the patch touches (one lookup each, before and after); without it the patched tables are read in full.
    /// Anything that fails removes `target` and throws.
    static func apply(
        to target: URL, copy method: FileClone.Method, patch: Changeset, expected: PublishedVersion,
        baseDigest: String? = nil, rule: Rule = .strict
    ) throws -> Outcome {
        do {
            return try applyOrThrow(
                to: target, copy: method, patch: patch, expected: expected, baseDigest: baseDigest, rule: rule)
        } catch {
            // The half-built file must not survive; the original error says what went wrong.
            try? FileManager.default.removeItem(at: target)
            // as above; also removed on the next open
            try? FileManager.default.removeItem(atPath: target.path + "-journal")
            throw error
        }
    }

    private static func applyOrThrow(
        to target: URL, copy method: FileClone.Method, patch: Changeset, expected: PublishedVersion,
        baseDigest: String?,
        rule: Rule
    ) throws -> Outcome {
        try patch.validate()
        var settled = 0
        var vacuumed = false
        var moved: ContentDigest?
        do {
            let db = try SQLiteConnection(path: target.path, mode: .readWrite)
            // The copy is scratch until it is verified, fsynced and renamed: a crash or a failure deletes it, so it
            // needs no rollback journal and no syncs of its own (a journal of the ~16 % of pages a 1 % change touches
            // would be written and fsynced for nothing). One fsync at the end makes it durable.
            try db.execute("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF")
            let (touched, base) = try digestPlan(patch, expected: expected, baseDigest: baseDigest)
            var digest = base
            var answered: [AnsweredRow] = []
            try db.transaction {
                // The queue stays as it is: the swap carries the live queue over and replays it on the result.
                settled = try settleAndApply(
                    patch, to: db, expected: expected, touched: touched, digest: &digest, rule: rule
                ) { _, _, rows in answered = rows }
            }
            moved = digest
            try Materializer.verifyContent(db, expected: expected, movedDigest: moved, file: target)
            if !answered.isEmpty {
                try db.transaction {
                    try Outbox.setCapture(false, db)
                    try Outbox.keepAnsweredRows(answered, in: db)
                    try Outbox.setCapture(true, db)
                }
            }
            let pages = try db.scalar("PRAGMA page_count")?.integer ?? 0
            let free = try db.scalar("PRAGMA freelist_count")?.integer ?? 0
            if pages > 0, Double(free) >= Double(pages) * vacuumFreeRatio {
                try db.execute("VACUUM")
                vacuumed = true
            }
        }
        try DurableFile.sync(target)
        return Outcome(
            copy: method, ownRowsSettled: settled, vacuumed: vacuumed, digestCheck: digestCheck(expected, moved))
    }

    /// Applies `patch` to the live database itself, on the app's writer inside its write transaction (FerryGRDB):
    /// the same conflict rules and checks as on a copy, then every queued edit replayed on top (as the swap's
    /// carry-over does). Anything that fails throws before the transaction commits, so the caller's rollback leaves
    /// the live database as it was. Readers of the app's pool see the old version until the commit (WAL).
    static func applyInPlace(
        on db: SQLiteConnection, patch: Changeset, expected: PublishedVersion, baseDigest: String?,
        tables: [SnapshotMetadata.TableInfo], rule: Rule = .strict
    ) throws -> Outcome {
        try patch.validate()
        var settled = 0
        let (touched, base) = try digestPlan(patch, expected: expected, baseDigest: baseDigest)
        var moved = base
        try db.transaction {
            settled = try settleAndApply(
                patch, to: db, expected: expected, touched: touched, digest: &moved, rule: rule
            ) { db, digest, answered in
                try Materializer.verifyContent(
                    db, expected: expected, movedDigest: digest, file: URL(fileURLWithPath: db.path))
                try Outbox.keepAnsweredRows(answered, in: db)
                try Outbox.rememberQueuedRows(in: db, tables: tables)
                try Outbox.replayQueued(in: db, tables: tables)
            }
        }
        return Outcome(copy: .clone, ownRowsSettled: settled, digestCheck: digestCheck(expected, moved))
    }

    /// How the digest was checked, given the moved digest (nil when it was read in full or there is none).
    private static func digestCheck(_ expected: PublishedVersion, _ moved: ContentDigest?) -> DigestCheck {
        expected.contentDigest == nil ? .none : (moved != nil ? .moved : .full)
    }

    /// Inside the caller's transaction, with capture off: the rows the device wrote put back as published, the patch
    /// applied to what is then exactly its base (see ``applyRows(_:to:expected:touched:digest:)``), the records of
    /// written rows forgotten, then `after` (with the digest moved, and the answered rows as the device held them,
    /// for ``Outbox/keepAnsweredRows(_:in:)`` once the result is verified). Returns the rows put back.
    private static func settleAndApply(
        _ patch: Changeset, to db: SQLiteConnection, expected: PublishedVersion,
        touched: [String: Changeset.TouchedRows],
        digest: inout ContentDigest?, rule: Rule,
        after: (SQLiteConnection, ContentDigest?, [AnsweredRow]) throws -> Void
    ) throws -> Int {
        let capture = try tableExists("ferry_capture", db)
        if capture { try Outbox.setCapture(false, db) }
        let baseTables = capture ? try SnapshotMetadata.read(from: db).tables : []
        let answered = try Outbox.answeredRows(in: db, tables: baseTables)
        let settled = try Outbox.restoreWrittenRows(in: db, tables: baseTables)
        try applyRows(patch, to: db, expected: expected, touched: touched, digest: &digest, rule: rule)
        try Outbox.forgetWrittenRows(in: db, tables: baseTables)
        try after(db, digest, answered)
        if capture { try Outbox.setCapture(true, db) }
        return settled
    }

    /// The rows whose digest moves and the base's digest to move, when the digest can be moved row by row (both
    /// versions record one); else no rows and nil. The rows the device wrote are put back first, so the base's
    /// digest holds for the database the patch applies to.
    private static func digestPlan(
        _ patch: Changeset, expected: PublishedVersion, baseDigest: String?
    ) throws -> ([String: Changeset.TouchedRows], ContentDigest?) {
        guard expected.contentDigest != nil, let base = baseDigest.flatMap(ContentDigest.init(hex:)) else {
            return ([:], nil)
        }
        return (try patch.touchedRows().filter { expected.tables[$0.key] != nil }, base)
    }

    /// Inside the caller's transaction, capture off: the digest moved around the patch (the base's, minus the touched
    /// rows before, plus them after), the patch applied (a conflict aborts), and the snapshot's description moved to
    /// `expected`, with the version it holds named in `ferry_origin` (its bytes are not the published ones).
    private static func applyRows(
        _ patch: Changeset, to db: SQLiteConnection, expected: PublishedVersion,
        touched: [String: Changeset.TouchedRows],
        digest: inout ContentDigest?, rule: Rule
    ) throws {
        if digest != nil { digest!.subtract(try ContentDigest.of(touched, in: db)) }
        try patch.apply(to: db) { rule.resolve($0) }
        if digest != nil { digest!.add(try ContentDigest.of(touched, in: db)) }
        try Materializer.moveSnapshot(db, to: expected)
        try db.execute("CREATE TABLE IF NOT EXISTS ferry_origin(sha256 TEXT NOT NULL); DELETE FROM ferry_origin;")
        try db.run("INSERT INTO ferry_origin(sha256) VALUES (?)", [.text(expected.sha256)])
    }

    static func tableExists(_ name: String, _ db: SQLiteConnection) throws -> Bool {
        try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", [.text(name)])?.integer
            == 1
    }
}

extension FileClone {
    /// How a failed copy of the database for a patch is reported.
    static let patchCopyFailure = "cannot copy the database for the patch"
    static let patchCopyFix = "free space and fetch again (database.db and any pending update are unchanged)"
}
