import FerryCore
import Foundation

/// The device's queue of local edits, kept inside the client database (`ferry_outbox`, see ``OutboxSchema``).
/// These functions run on the one connection that owns the database.
///
/// ```swift
/// let batch = try Outbox.takeLineBatch(from: db, limit: 500)  // one line's edits, marked sent, durably
/// let results = try await upload(batch.changes)               // POST /v1/datasets/{line}/changes
/// let summary = try Outbox.record(results, for: batch.changes, in: db, tables: tables, line: batch.line)
/// ```
public enum Outbox {
    /// Queued edits made under one schema line, oldest first (see ``takeLineBatch(from:limit:through:)``).
    public struct LineBatch: Sendable, Equatable {
        /// The line the edits were made under (`trips.v1`), when it is not the line of the database the queue sits
        /// in; nil: that database's own line (its `ferry_snapshot.dataset`).
        public var line: String?
        public var changes: [Change]

        public init(line: String?, changes: [Change]) {
            self.line = line
            self.changes = changes
        }
    }

    /// The `seq` of the newest queued edit, 0 when the queue is empty.
    ///
    /// ```swift
    /// let last = try Outbox.lastSequence(in: db)
    /// ```
    public static func lastSequence(in db: SQLiteConnection) throws -> Int64 {
        guard try hasQueue(db) else { return 0 }
        return try db.scalar("SELECT coalesce(max(seq), 0) FROM ferry_outbox")?.integer ?? 0
    }

    /// Number of edits waiting for a server answer.
    public static func count(in db: SQLiteConnection) throws -> Int {
        guard try hasQueue(db) else { return 0 }
        return Int(try db.scalar("SELECT count(*) FROM ferry_outbox")?.integer ?? 0)
    }

    static func hasQueue(_ db: SQLiteConnection) throws -> Bool {
        try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ferry_outbox'")?.integer == 1
    }

    /// The changes of ``takeLineBatch(from:limit:through:)``.
    public static func takeBatch(from db: SQLiteConnection, limit: Int, through last: Int64 = .max) throws -> [Change] {
        try takeLineBatch(from: db, limit: limit, through: last).changes
    }

    /// The oldest `limit` edits made under the line of the oldest queued edit, in order, marked `sent` in the same
    /// transaction so that no later local edit is coalesced into a change the server may already have applied.
    /// Edits already sent but not answered (a crash or a network failure after the upload) come first and keep their
    /// ids: the server answers them once. With `through`, only edits up to that `seq` are taken (``lastSequence(in:)``
    /// when a push began), so a push ends even while the app keeps writing; later edits wait for the next push.
    /// Edits of another line (queued before a swap to a new schema line) come in batches of their own, since each
    /// line's edits go to that line's `changes` URL.
    ///
    /// ```swift
    /// let batch = try Outbox.takeLineBatch(from: db, limit: 500)
    /// let url = "/v1/datasets/\(batch.line ?? currentLine)/changes"
    /// ```
    public static func takeLineBatch(from db: SQLiteConnection, limit: Int, through last: Int64 = .max) throws
        -> LineBatch
    {
        guard try hasQueue(db) else { return LineBatch(line: nil, changes: []) }
        let hasLines = try OutboxSchema.hasLineColumn(db)
        let baseColumn = try OutboxSchema.hasColumn(db, "ferry_outbox", "base") ? "base" : "NULL"
        return try db.transaction {
            var line: String?
            if hasLines {
                line = try db.query(
                    "SELECT line FROM ferry_outbox WHERE seq <= ? ORDER BY seq LIMIT 1", [.integer(last)]
                )
                .first?.first?.text
            }
            let sameLine = hasLines ? " AND line IS ?" : ""
            let lineValue: [SQLiteValue] = hasLines ? [line.map { .text($0) } ?? .null] : []
            let rows = try db.query(
                "SELECT seq, id, tbl, op, key, vals, editedAt, baseUpdatedAt, \(baseColumn) FROM ferry_outbox WHERE seq <= ?\(sameLine) ORDER BY seq LIMIT ?",
                [.integer(last)] + lineValue + [.integer(Int64(limit))])
            var changes: [Change] = []
            for row in rows {
                guard let id = row[1].text, let table = row[2].text, let opText = row[3].text,
                    let op = Change.Operation(rawValue: opText),
                    let key = row[4].text, let vals = row[5].text, let editedAt = row[6].text
                else {
                    throw FerryError(.verification, "ferry_outbox has a malformed entry (seq \(row[0]))", path: db.path)
                }
                changes.append(
                    Change(
                        id: id, table: table, op: op, key: try decodeObject(key, db),
                        values: try decodeObject(vals, db),
                        editedAt: editedAt, baseUpdatedAt: row[7].text,
                        base: op == .update ? try row[8].text.map { try decodeObject($0, db) } : nil))
            }
            if let last = rows.last?[0].integer {
                try db.run(
                    "UPDATE ferry_outbox SET sent = 1 WHERE seq <= ? AND sent = 0\(sameLine)",
                    [.integer(last)] + lineValue)
            }
            return LineBatch(line: line, changes: changes)
        }
    }

    /// The dataset of the database the queue sits in (`ferry_snapshot.dataset`: the line that queued rows without a
    /// `line` were made under); nil when the file has no snapshot description.
    ///
    /// ```swift
    /// let line = batch.line ?? Outbox.currentLine(of: db) ?? configuredDataset
    /// ```
    public static func currentLine(of db: SQLiteConnection, schema: String = "main") throws -> String? {
        guard
            try db.scalar(
                "SELECT count(*) FROM \(schema).sqlite_master WHERE type = 'table' AND name = 'ferry_snapshot'")?
                .integer == 1
        else { return nil }
        return try db.scalar("SELECT dataset FROM \(schema).ferry_snapshot LIMIT 1")?.text
    }

    /// Per-status counts of what the server answered.
    public struct Summary: Sendable, Equatable, Codable, ChangeTally {
        public var applied = 0, rejected = 0, gone = 0, invalid = 0, forbidden = 0
        /// Changes merged per column of which some columns lost (kept like rejected edits).
        public var merged = 0
        /// Changes the server did not answer; they stay queued.
        public var unanswered = 0
        public init() {}
        mutating func merge(_ other: Summary) {
            applied += other.applied
            rejected += other.rejected
            gone += other.gone
            invalid += other.invalid
            forbidden += other.forbidden
            merged += other.merged
            unanswered += other.unanswered
        }
    }

    /// Writes the server's answers in one transaction: the winning (or merged) row replaces the local one (then any newer
    /// local edit of that row is replayed on top, so it stays visible), `gone` removes the row, and every answered
    /// edit leaves the queue. `invalid` and `forbidden` edits are dropped, each reported through `log`.
    /// A batch of another schema line (`line`, from ``LineBatch/line``) leaves the tables alone (their columns are
    /// this line's; the next version of it carries what the server merged): its answered edits leave the queue, and
    /// `rejected`, `gone` and `merged` ones are kept in `ferry_rejected` as any.
    public static func record(
        _ results: [ChangeResult], for batch: [Change], in db: SQLiteConnection, tables: [SnapshotMetadata.TableInfo],
        line: String? = nil, log: (String) -> Void = { _ in }
    ) throws -> Summary {
        let byID = Dictionary(results.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        let tableInfo = Dictionary(uniqueKeysWithValues: tables.map { ($0.name, $0) })
        var summary = Summary()
        try db.transaction {
            // Capture is switched back on at the end of this transaction; if the transaction fails, its rollback
            // restores the switch with everything else.
            try setCapture(false, db)
            for change in batch {
                guard let result = byID[change.id] else {
                    summary.unanswered += 1
                    continue
                }
                summary.count(result.status)
                try db.run("DELETE FROM ferry_outbox WHERE id = ?", [.text(change.id)])
                if let line {
                    try recordForeign(
                        change, result, line: line, rule: tableInfo[change.table]?.merge, db: db, log: log)
                    continue
                }
                guard let table = tableInfo[change.table] else { continue }
                if [.rejected, .gone, .merged].contains(result.status) {
                    try RejectedEdit.keep(change, result: result, rule: table.merge, in: db)
                }
                let keyText = try keyText(change.key, table: table, db: db)
                switch result.status {
                case .applied, .rejected, .merged:
                    if let row = result.row {
                        try writeRow(row, table: table, db: db)
                    } else {
                        try deleteRow(key: change.key, table: table, db: db)
                    }
                    // The row now carries the server's updated_at: later edits of it are based on that.
                    try db.run(
                        "UPDATE ferry_outbox SET baseUpdatedAt = ? WHERE tbl = ? AND key = ? AND op != 'insert' AND line IS NULL",
                        [
                            result.row.flatMap { r in table.updatedColumn.flatMap { r[$0] } }.map(sqliteValue) ?? .null,
                            .text(change.table), .text(keyText),
                        ])
                    try replayPending(table: table, keyText: keyText, db: db)
                case .gone:
                    try deleteRow(key: change.key, table: table, db: db)
                    try db.run(
                        "DELETE FROM ferry_outbox WHERE tbl = ? AND key = ? AND line IS NULL",
                        [.text(change.table), .text(keyText)])
                case .invalid, .forbidden:
                    log(
                        "edit \(change.id) (\(change.op.rawValue) on \(change.table)) was \(result.status.rawValue) by the server and is dropped: \(result.message ?? "no reason given")"
                    )
                }
                if try db.scalar(
                    "SELECT count(*) FROM ferry_outbox WHERE tbl = ? AND key = ?",
                    [.text(change.table), .text(keyText)])?.integer == 0
                {
                    try db.run(
                        "DELETE FROM ferry_base WHERE tbl = ? AND key = ?", [.text(change.table), .text(keyText)])
                }
                // Whether the row now holds the server's answer (kept until a version carries it, Outbox+Written).
                if try PatchApplier.tableExists("ferry_written", db) {
                    let holdsAnswer = [.applied, .rejected, .merged].contains(result.status) && result.row != nil
                    try db.run(
                        "UPDATE ferry_written SET answered = ? WHERE tbl = ? AND key = ?",
                        [.integer(holdsAnswer ? 1 : 0), .text(change.table), .text(keyText)])
                }
            }
            try setCapture(true, db)
        }
        return summary
    }

    /// The answer to an edit of another schema line: kept in `ferry_rejected` when `rejected` or `gone` (with the
    /// merge rule of this line's table of that name, else the templates' default; the edit's own template is not at
    /// hand), logged when `invalid` or `forbidden`. The line's later edits of a `gone` row go too.
    private static func recordForeign(
        _ change: Change, _ result: ChangeResult, line: String, rule: MergeRule?, db: SQLiteConnection,
        log: (String) -> Void
    ) throws {
        switch result.status {
        case .applied:
            break
        case .rejected, .gone, .merged:
            try RejectedEdit.keep(change, result: result, rule: rule ?? .newestWins, in: db)
            if result.status == .gone {
                let encoder = JSONEncoder()
                encoder.outputFormatting = .sortedKeys
                for row in try db.query(
                    "SELECT id, key FROM ferry_outbox WHERE tbl = ? AND line IS ?", [.text(change.table), .text(line)])
                {
                    guard let id = row[0].text, let key = row[1].text, try decodeObject(key, db) == change.key
                    else { continue }
                    try db.run("DELETE FROM ferry_outbox WHERE id = ?", [.text(id)])
                }
            }
        case .invalid, .forbidden:
            log(
                "edit \(change.id) (\(change.op.rawValue) on \(change.table), schema line \(line)) was \(result.status.rawValue) by the server and is dropped: \(result.message ?? "no reason given")"
            )
        }
    }

    /// Carries the queue from the live database into a freshly fetched snapshot and replays every queued edit on
    /// top of it, so a new snapshot never hides a pending edit. Runs on the new file before it is swapped in. Each
    /// queued row is recorded as written first (`rememberQueuedRows(in:tables:)`), so the next patch can put it back.
    ///
    /// When the new file is of another schema line than the live one (their `ferry_snapshot.dataset` differ), the
    /// queued rows without a `line` are stamped with the live file's line as they move, and rows of any line but
    /// the new file's are not replayed (their columns are their line's): they stay queued and are uploaded to their
    /// line. Rows of the new file's line become its own again (`line` NULL), and are replayed.
    public static func carryOver(
        fromLiveDatabaseAt livePath: String, into db: SQLiteConnection, tables: [SnapshotMetadata.TableInfo],
        origin: String? = nil
    ) throws {
        try OutboxSchema.install(on: db, tables: tables, origin: origin)
        guard FileManager.default.fileExists(atPath: livePath) else { return }
        try db.run("ATTACH DATABASE ? AS live", [.text(livePath)])
        // `db` is the pending snapshot's own connection, closed right after the swap's preparation: a database left
        // attached to it changes nothing on disk.
        defer { try? db.execute("DETACH DATABASE live") }
        let liveHasQueue =
            try db.scalar("SELECT count(*) FROM live.sqlite_master WHERE type = 'table' AND name = 'ferry_outbox'")?
            .integer == 1
        guard liveHasQueue else { return }
        let tableInfo = Dictionary(uniqueKeysWithValues: tables.map { ($0.name, $0) })
        let liveLine = try currentLine(of: db, schema: "live")
        let newLine = try currentLine(of: db)
        // Both files name their line, and the lines differ: the queue moves to another line.
        let crossing = liveLine != nil && newLine != nil && liveLine != newLine
        let stamp = crossing ? liveLine : nil
        let queuedLine = try OutboxSchema.hasLineColumn(db, schema: "live") ? "line" : "NULL"
        let queuedBase = try OutboxSchema.hasColumn(db, "ferry_outbox", "base", schema: "live") ? "base" : "NULL"
        // Answers the new file does not carry yet (published before the server merged them) stay visible; rows
        // of another line's tables may have other columns, and the new line's next version carries them. Read
        // before the transaction, which writes only `main`.
        let answered = crossing ? [] : try answeredRows(in: db, schema: "live", tables: tables)
        // Nothing to carry (a device with no edit queued, kept or refused, and an empty queue in the new file): the
        // transaction below would leave the new file as it is, so it is skipped, with the journals and the six
        // syncs of a transaction over two files. The common case for a device that only reads.
        if answered.isEmpty, try nothingQueued(db) { return }
        try db.transaction {
            try db.execute(
                "DELETE FROM main.ferry_outbox; DELETE FROM main.ferry_base; DELETE FROM main.ferry_rejected;")
            try db.run(
                """
                INSERT INTO main.ferry_outbox(seq, id, tbl, op, key, vals, editedAt, baseUpdatedAt, sent, line, base)
                  SELECT seq, id, tbl, op, key, vals, editedAt, baseUpdatedAt, sent, \(stamp != nil ? "coalesce(\(queuedLine), ?)" : queuedLine), \(queuedBase)
                  FROM live.ferry_outbox
                """, stamp.map { [SQLiteValue.text($0)] } ?? [])
            if let newLine {
                try db.run("UPDATE main.ferry_outbox SET line = NULL WHERE line = ?", [.text(newLine)])
            }
            // The server's updated_at of a row is the same whichever line shows it: the bases stay.
            try db.execute("INSERT INTO main.ferry_base SELECT * FROM live.ferry_base")
            // A database written before rejected edits were kept has no such table: nothing to carry.
            if try db.scalar(
                "SELECT count(*) FROM live.sqlite_master WHERE type = 'table' AND name = 'ferry_rejected'")?.integer
                == 1
            {
                let kept = "id, tbl, op, key, vals, status, rule, reason, editedAt, answeredAt"
                let later = try ["serverVals", "lost"].map {
                    try OutboxSchema.hasColumn(db, "ferry_rejected", $0, schema: "live") ? $0 : "NULL"
                }
                try db.execute(
                    "INSERT INTO main.ferry_rejected(\(kept), serverVals, lost) SELECT \(kept), \(later.joined(separator: ", ")) FROM live.ferry_rejected"
                )
            }
            // Capture is switched back on at the end of this transaction; if the transaction fails, its rollback
            // restores the switch with everything else.
            try setCapture(false, db)
            // The new file's own records of written rows stay (a rollback's previous.db has some); each queued row
            // it has no record of is recorded as it holds it now, its published values, before the replay.
            try rememberQueuedRows(in: db, tables: tables)
            try replayQueued(in: db, tables: tables, tableInfo: tableInfo)
            try keepAnsweredRows(answered, in: db)
            try setCapture(true, db)
        }
    }

    /// True when the live file (attached as `live`) queues, bases and keeps no edit, and the new file (`main`)
    /// holds none either, with capture on: then carrying over changes nothing.
    static func nothingQueued(_ db: SQLiteConnection) throws -> Bool {
        let liveRejected =
            try db.scalar("SELECT count(*) FROM live.sqlite_master WHERE type = 'table' AND name = 'ferry_rejected'")?
            .integer == 1
        let empty =
            [
                "live.ferry_outbox", "live.ferry_base", "main.ferry_outbox", "main.ferry_base", "main.ferry_rejected",
            ] + (liveRejected ? ["live.ferry_rejected"] : [])
        let checks = empty.map { "NOT EXISTS (SELECT 1 FROM \($0))" }.joined(separator: " AND ")
        return try db.scalar("SELECT \(checks) AND (SELECT enabled FROM main.ferry_capture) = 1")?.integer == 1
    }

    /// Replays every queued edit of this database's line, in order, on top of what the database holds now (capture
    /// must be off); edits of another line stay queued without touching the tables.
    static func replayQueued(
        in db: SQLiteConnection, tables: [SnapshotMetadata.TableInfo],
        tableInfo: [String: SnapshotMetadata.TableInfo]? = nil
    ) throws {
        let tableInfo = tableInfo ?? Dictionary(uniqueKeysWithValues: tables.map { ($0.name, $0) })
        for row in try db.query(
            "SELECT tbl, op, key, vals, editedAt FROM main.ferry_outbox WHERE line IS NULL ORDER BY seq")
        {
            guard let name = row[0].text, let table = tableInfo[name],
                let op = row[1].text.flatMap(Change.Operation.init(rawValue:)),
                let key = row[2].text, let vals = row[3].text, let editedAt = row[4].text
            else { continue }
            try replay(
                op: op, key: try decodeObject(key, db), values: try decodeObject(vals, db), editedAt: editedAt,
                table: table, db: db)
        }
    }
}
