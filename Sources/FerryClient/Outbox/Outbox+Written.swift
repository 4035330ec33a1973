import FerryCore
import Foundation

/// The rows a device wrote itself since the version it holds (`ferry_written`, with each table's `ferry_was_…`
/// copy of the published values; see ``OutboxSchema``). Capture triggers record a row before its first local write;
/// an answered push leaves the record in place, since the server's row is not the published one either. A patch
/// puts every such row back as the version published it (`restoreWrittenRows(in:tables:)`), so the patch applies
/// without a conflict and the result can be checked as strictly as on a device that never edited. Then the
/// records go (the device holds exactly the new version), and the queued edits are replayed on top, each row
/// recorded again first (`rememberQueuedRows(in:tables:)`).
extension Outbox {
    /// How many rows the device wrote since the version it holds.
    static func writtenCount(in db: SQLiteConnection) throws -> Int {
        guard try PatchApplier.tableExists("ferry_written", db) else { return 0 }
        return Int(try db.scalar("SELECT count(*) FROM ferry_written")?.integer ?? 0)
    }

    /// Puts every row the device wrote back as the held version published it: a row the version had gets its
    /// published values, a row it lacked is removed. Capture must be off, inside the caller's transaction. Returns
    /// the rows put back. Throws when a queued edit's row has no record (edits queued by a client from before the
    /// records existed): such a database cannot be brought back to its version, and the caller takes the full
    /// download.
    static func restoreWrittenRows(in db: SQLiteConnection, tables: [SnapshotMetadata.TableInfo]) throws -> Int {
        guard try hasQueue(db) else { return 0 }
        guard try PatchApplier.tableExists("ferry_written", db) else {
            if try count(in: db) == 0 { return 0 }
            throw FerryError(
                .verification, "the queued edits predate the record of written rows; the patch cannot settle them",
                path: db.path)
        }
        let unrecorded =
            try db.scalar(
                """
                SELECT count(*) FROM (SELECT DISTINCT tbl, key FROM ferry_outbox WHERE line IS NULL) AS q
                WHERE NOT EXISTS (SELECT 1 FROM ferry_written AS w WHERE w.tbl = q.tbl AND w.key = q.key)
                """)?.integer ?? 0
        guard unrecorded == 0 else {
            throw FerryError(
                .verification,
                "\(unrecorded) queued rows were edited before this client recorded written rows; the patch cannot settle them",
                path: db.path)
        }
        let tableInfo = Dictionary(uniqueKeysWithValues: tables.map { ($0.name, $0) })
        var restored = 0
        var shadowed = Set<String>()
        for row in try db.query("SELECT tbl, key FROM ferry_written ORDER BY tbl, key") {
            guard let name = row[0].text, let keyText = row[1].text else { continue }
            guard let table = tableInfo[name], table.writable else {
                throw FerryError(
                    .verification, "ferry_written names table '\(name)', which is not a writable table of this version",
                    path: db.path, key: name)
            }
            try deleteRow(key: try decodeObject(keyText, db), table: table, db: db)
            shadowed.insert(name)
            restored += 1
        }
        for name in shadowed.sorted() {
            let table = try OutboxSchema.quoted(name, in: [name], table: name)
            try db.execute("INSERT INTO \(table) SELECT * FROM \(OutboxSchema.shadowTable(name))")
        }
        return restored
    }

    /// Forgets every record of written rows: the database now holds exactly a published version.
    static func forgetWrittenRows(in db: SQLiteConnection, tables: [SnapshotMetadata.TableInfo]) throws {
        guard try PatchApplier.tableExists("ferry_written", db) else { return }
        try db.execute("DELETE FROM ferry_written")
        for table in tables where table.writable && !table.primaryKey.isEmpty {
            if try PatchApplier.tableExists(OutboxSchema.shadowName(table.name), db) {
                try db.execute("DELETE FROM \(OutboxSchema.shadowTable(table.name))")
            }
        }
    }

    /// Records, for every queued row (of this database's line) not yet recorded, the row as the database holds it
    /// now (the published one), before the queue is replayed on top. Capture must be off, inside the caller's
    /// transaction.
    static func rememberQueuedRows(in db: SQLiteConnection, tables: [SnapshotMetadata.TableInfo]) throws {
        guard try hasQueue(db), try PatchApplier.tableExists("ferry_written", db) else { return }
        let tableInfo = Dictionary(uniqueKeysWithValues: tables.map { ($0.name, $0) })
        let queued = try db.query(
            """
            SELECT DISTINCT tbl, key FROM main.ferry_outbox AS q
            WHERE q.line IS NULL AND NOT EXISTS (SELECT 1 FROM main.ferry_written AS w WHERE w.tbl = q.tbl AND w.key = q.key)
            """)
        for row in queued {
            guard let name = row[0].text, let keyText = row[1].text, let table = tableInfo[name], table.writable else {
                continue
            }
            let existing = try columns(table, db)
            let (whereSQL, values) = try keyPredicate(try decodeObject(keyText, db), table: table, existing: existing)
            let quoted = try OutboxSchema.quoted(name, in: [name], table: name)
            let present =
                try db.run(
                    "INSERT OR IGNORE INTO main.\(OutboxSchema.shadowTable(name)) SELECT * FROM main.\(quoted) WHERE \(whereSQL)",
                    values) > 0
            try db.run(
                "INSERT OR IGNORE INTO main.ferry_written(tbl, key, present) VALUES (?, ?, ?)",
                [.text(name), .text(keyText), .integer(present ? 1 : 0)])
        }
    }
}

// MARK: - Answers a version does not carry yet

/// A row the device wrote whose edits the server has all answered (nothing queued on it), as the device holds it:
/// the server's answer, stamped by the server.
struct AnsweredRow {
    let table: SnapshotMetadata.TableInfo
    let keyText: String
    let key: [String: JSONValue]
    let values: [SQLiteValue]
}

extension Outbox {
    /// The answered rows of `schema` (`main`, or an attached `live`) in tables with an `updated_at` column: what
    /// ``keepAnsweredRows(_:in:)`` puts back where the new version does not carry them yet.
    static func answeredRows(in db: SQLiteConnection, schema: String = "main", tables: [SnapshotMetadata.TableInfo])
        throws -> [AnsweredRow]
    {
        let hasWritten =
            try db.scalar(
                "SELECT count(*) FROM \(schema).sqlite_master WHERE type = 'table' AND name IN ('ferry_written', 'ferry_outbox')"
            )?.integer == 2
        guard hasWritten else { return [] }
        let tableInfo = Dictionary(uniqueKeysWithValues: tables.map { ($0.name, $0) })
        var out: [AnsweredRow] = []
        let answered = try db.query(
            """
            SELECT tbl, key FROM \(schema).ferry_written AS w
            WHERE w.answered = 1 AND NOT EXISTS (SELECT 1 FROM \(schema).ferry_outbox AS o WHERE o.tbl = w.tbl AND o.key = w.key)
            """)
        for row in answered {
            guard let name = row[0].text, let keyText = row[1].text, let table = tableInfo[name], table.writable,
                table.updatedColumn != nil
            else { continue }
            let key = try decodeObject(keyText, db)
            let (whereSQL, values) = try keyPredicate(key, table: table, existing: try columns(table, db))
            let quoted = try OutboxSchema.quoted(name, in: [name], table: name)
            // A row the answer deleted is not kept: the published row wins there (no stamp tells which is newer).
            if let current = try db.query("SELECT * FROM \(schema).\(quoted) WHERE \(whereSQL)", values).first {
                out.append(AnsweredRow(table: table, keyText: keyText, key: key, values: current))
            }
        }
        return out
    }

    /// Puts back each answered row that the database now holds older (by its `updated_at`): a
    /// version published before the server merged the edit. The row is recorded as written first (the published
    /// row, or its absence), so the next patch puts it back as published; the next version carries the answer.
    /// An app that edits a row by what it reads (`body = body || …`) so never builds on a value the server has
    /// already replaced. Capture must be off, inside the caller's transaction. Returns the rows put back.
    @discardableResult
    static func keepAnsweredRows(_ rows: [AnsweredRow], in db: SQLiteConnection) throws -> Int {
        var kept = 0
        for row in rows {
            let table = row.table
            let existing = try columns(table, db)
            guard existing.count == row.values.count, let updated = table.updatedColumn,
                let at = existing.firstIndex(of: updated),
                let answered = row.values[at].text.flatMap(Timestamp.parseMillis)
            else { continue }
            let (whereSQL, keyValues) = try keyPredicate(row.key, table: table, existing: existing)
            let quoted = try OutboxSchema.quoted(table.name, in: [table.name], table: table.name)
            // A version without the row (a scope that no longer includes it, or an insert not published yet) wins:
            // no stamp says which is newer.
            guard let published = try db.query("SELECT * FROM main.\(quoted) WHERE \(whereSQL)", keyValues).first,
                let stamp = published[at].text.flatMap(Timestamp.parseMillis), stamp < answered
            else { continue }
            let present =
                try db.run(
                    "INSERT OR IGNORE INTO main.\(OutboxSchema.shadowTable(table.name)) SELECT * FROM main.\(quoted) WHERE \(whereSQL)",
                    keyValues) > 0
            try db.run(
                "INSERT OR IGNORE INTO main.ferry_written(tbl, key, present, answered) VALUES (?, ?, ?, 1)",
                [.text(table.name), .text(row.keyText), .integer(present ? 1 : 0)])
            try db.run("DELETE FROM main.\(quoted) WHERE \(whereSQL)", keyValues)
            let marks = Array(repeating: "?", count: row.values.count).joined(separator: ", ")
            try db.run("INSERT INTO main.\(quoted) VALUES (\(marks))", row.values)
            kept += 1
        }
        return kept
    }
}
