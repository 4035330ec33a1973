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
            throw FerryError(.verification, "the queued edits predate the record of written rows; the patch cannot settle them", path: db.path)
        }
        let unrecorded = try db.scalar("""
            SELECT count(*) FROM (SELECT DISTINCT tbl, key FROM ferry_outbox) AS q
            WHERE NOT EXISTS (SELECT 1 FROM ferry_written AS w WHERE w.tbl = q.tbl AND w.key = q.key)
            """)?.integer ?? 0
        guard unrecorded == 0 else {
            throw FerryError(
                .verification, "\(unrecorded) queued rows were edited before this client recorded written rows; the patch cannot settle them",
                path: db.path)
        }
        let tableInfo = Dictionary(uniqueKeysWithValues: tables.map { ($0.name, $0) })
        var restored = 0
        var shadowed = Set<String>()
        for row in try db.query("SELECT tbl, key FROM ferry_written ORDER BY tbl, key") {
            guard let name = row[0].text, let keyText = row[1].text else { continue }
            guard let table = tableInfo[name], table.writable else {
                throw FerryError(.verification, "ferry_written names table '\(name)', which is not a writable table of this version", path: db.path, key: name)
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

    /// Records, for every queued row not yet recorded, the row as the database holds it now (the published one),
    /// before the queue is replayed on top. Capture must be off, inside the caller's transaction.
    static func rememberQueuedRows(in db: SQLiteConnection, tables: [SnapshotMetadata.TableInfo]) throws {
        guard try hasQueue(db), try PatchApplier.tableExists("ferry_written", db) else { return }
        let tableInfo = Dictionary(uniqueKeysWithValues: tables.map { ($0.name, $0) })
        let queued = try db.query("""
            SELECT DISTINCT tbl, key FROM main.ferry_outbox AS q
            WHERE NOT EXISTS (SELECT 1 FROM main.ferry_written AS w WHERE w.tbl = q.tbl AND w.key = q.key)
            """)
        for row in queued {
            guard let name = row[0].text, let keyText = row[1].text, let table = tableInfo[name], table.writable else { continue }
            let existing = try columns(table, db)
            let (whereSQL, values) = try keyPredicate(try decodeObject(keyText, db), table: table, existing: existing)
            let quoted = try OutboxSchema.quoted(name, in: [name], table: name)
            let present = try db.run("INSERT OR IGNORE INTO main.\(OutboxSchema.shadowTable(name)) SELECT * FROM main.\(quoted) WHERE \(whereSQL)", values) > 0
            try db.run(
                "INSERT OR IGNORE INTO main.ferry_written(tbl, key, present) VALUES (?, ?, ?)", [.text(name), .text(keyText), .integer(present ? 1 : 0)])
        }
    }
}
