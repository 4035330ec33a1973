import FerryCore
import Foundation

/// One table of an ``IncrementalBuild``: the old row index's entries, and the statements that write the copy.
/// Changes found while the copy is still being made wait in `pending` (their tuples copied), up to
/// ``pendingLimit`` bytes, and are written in order once it is ready.
final class TableDiff {
    let plan: TablePlan
    let hasher: RowHasher
    private let build: IncrementalBuild
    private let old: IndexedTable
    private let index: RowIndexWriter
    private var counts = IncrementalCounts()
    private var added = ContentDigest()
    private var removed = ContentDigest()
    private var statements: Statements?
    private var pending: [Pending] = []
    private var pendingBytes: [UInt8] = []
    /// The rows this table's build inserted: their row index entry and primary key. The rowid SQLite gave each one
    /// here is not the one applying the patch gives it (``IncrementalBuild/materialize(_:expected:diffs:)``), so
    /// the entry is corrected once the patch is applied.
    private(set) var insertedKeys: [(entry: Int, key: [SQLiteValue])] = []

    static let pendingLimit = 16 << 20

    private struct Statements {
        let update: SQLiteStatement
        let insert: SQLiteStatement
        let delete: SQLiteStatement
        let select: SQLiteStatement
        let selectKey: SQLiteStatement
    }

    /// A change waiting for the copy: its tuple is `pendingBytes[start..<end]`; `rowid` nil for an insert.
    private struct Pending {
        let key: UInt64
        let row: UInt64
        let rowid: Int64?
        let start: Int
        let end: Int
    }

    init(plan: TablePlan, build: IncrementalBuild, index: RowIndexWriter) throws {
        self.plan = plan
        self.build = build
        self.index = index
        hasher = build.hasher
        old = try build.oldTable(plan.name)
    }

    /// Finalizes the statements on the build's connection, so it can close.
    func releaseStatements() { statements = nil }

    private var keyColumns: String { plan.primaryKey.map(SQLIdentifier.quote).joined(separator: ", ") }

    private func prepared(_ db: SQLiteConnection) throws -> Statements {
        if let statements { return statements }
        let table = SQLIdentifier.quote(plan.name)
        let assignments = plan.columns.enumerated().map { "\(SQLIdentifier.quote($1.name)) = ?\($0 + 1)" }.joined(
            separator: ", ")
        let made = Statements(
            update: try db.prepare("UPDATE \(table) SET \(assignments) WHERE rowid = ?\(plan.columns.count + 1)"),
            insert: try db.prepare(plan.insertSQL),
            delete: try db.prepare("DELETE FROM \(table) WHERE rowid = ?"),
            select: try db.prepare("SELECT * FROM \(table) WHERE rowid = ?"),
            selectKey: try db.prepare("SELECT \(keyColumns) FROM \(table) WHERE rowid = ?"))
        statements = made
        return made
    }

    /// Handles one row of the new data (`tuple`, as COPY sent it): an unchanged row is only counted; a changed row
    /// is rewritten in place, a new one inserted, now or once the copy is ready. Returns the row's rowid in the
    /// copy, or nil for an insert still waiting (its index entry is written when it is applied).
    @inline(__always)
    func handle(key: UInt64, row: UInt64, tuple: UnsafeRawBufferPointer, loader: CopyLoader) throws -> Int64? {
        let found: Int?
        do { found = try old.take(key) } catch let error as RowIndexUnusable {
            throw IncrementalUnavailable(description: error.description)
        }
        let rowid = found.map { old.rowids[$0] }
        if let found, old.rows[found] == row {
            counts.unchanged += 1
            return rowid
        }
        if let db = try build.database(wait: pendingBytes.count >= Self.pendingLimit) {
            try drain(db, loader: loader)
            return try apply(db, key: key, row: row, rowid: rowid, tuple: tuple, loader: loader)
        }
        let start = pendingBytes.count
        pendingBytes.append(contentsOf: tuple)
        pending.append(Pending(key: key, row: row, rowid: rowid, start: start, end: pendingBytes.count))
        return rowid
    }

    /// Writes one change to the copy; returns its rowid.
    private func apply(
        _ db: SQLiteConnection, key: UInt64, row: UInt64, rowid: Int64?, tuple: UnsafeRawBufferPointer,
        loader: CopyLoader
    ) throws -> Int64 {
        let s = try prepared(db)
        if let rowid {
            try removed.add(rowsOf: plan.name, s.select, [.integer(rowid)])
            try loader.bind(tuple: tuple, to: s.update)
            s.update.bindInt64(rowid, at: Int32(plan.columns.count + 1))
            try write(s.update, "rewrite")
            guard db.changes == 1 else {
                throw IncrementalUnavailable(
                    description:
                        "table '\(plan.name)': rowid \(rowid) of the row index is not in version \(build.base.version)'s file"
                )
            }
            try added.add(rowsOf: plan.name, s.select, [.integer(rowid)])
            counts.updated += 1
            return rowid
        }
        try loader.bind(tuple: tuple, to: s.insert)
        try write(s.insert, "insert")
        let inserted = db.lastInsertRowID
        try added.add(rowsOf: plan.name, s.select, [.integer(inserted)])
        s.selectKey.reset()
        try s.selectKey.bind([.integer(inserted)])
        guard try s.selectKey.step() else {
            throw IncrementalUnavailable(description: "table '\(plan.name)': the row just inserted is not there")
        }
        insertedKeys.append((index.tableCount, (0..<plan.primaryKey.count).map { s.selectKey.value(at: $0) }))
        s.selectKey.reset()
        counts.inserted += 1
        return inserted
    }

    /// The rowid each inserted row has in `db` (the file with the patch applied), by row index entry.
    func rowidsOfInserted(in db: SQLiteConnection) throws -> [(entry: Int, rowid: Int64)] {
        let condition = plan.primaryKey.enumerated().map { "\(SQLIdentifier.quote($1)) = ?\($0 + 1)" }.joined(
            separator: " AND ")
        let lookup = try db.prepare("SELECT rowid FROM \(SQLIdentifier.quote(plan.name)) WHERE \(condition)")
        return try insertedKeys.map { inserted in
            lookup.reset()
            try lookup.bind(inserted.key)
            guard try lookup.step(), let rowid = lookup.value(at: 0).integer else {
                throw IncrementalUnavailable(
                    description: "table '\(plan.name)': a row the step inserts is not in the file it built")
            }
            return (inserted.entry, rowid)
        }
    }

    /// Writes the changes that waited for the copy, in the order they came.
    private func drain(_ db: SQLiteConnection, loader: CopyLoader) throws {
        guard !pending.isEmpty else { return }
        try pendingBytes.withUnsafeBytes { bytes in
            for change in pending {
                let tuple = UnsafeRawBufferPointer(rebasing: bytes[change.start..<change.end])
                let rowid = try apply(
                    db, key: change.key, row: change.row, rowid: change.rowid, tuple: tuple, loader: loader)
                if change.rowid == nil { try index.append(key: change.key, row: change.row, rowid: rowid) }
            }
        }
        pending.removeAll()
        pendingBytes.removeAll()
    }

    private func write(_ statement: SQLiteStatement, _ what: String) throws {
        defer { statement.reset() }
        do { try statement.step() } catch let error as FerryError {
            // A constraint the new rows only meet once every change is in (two rows swapping a UNIQUE value, say):
            // a build from scratch inserts them all into empty tables.
            throw IncrementalUnavailable(
                description: "table '\(plan.name)': cannot \(what) a row in the copy: \(error.message)")
        }
    }

    /// Keeps every row of the table as the current version has it, without reading PostgreSQL: a publish on change
    /// whose triggers said this table did not change (docs/freshness.md). The row index gets the old entries; the
    /// file and the digest are untouched. Returns the rows kept.
    func keepAll() throws -> Int {
        for entry in 0..<old.count {
            try index.append(key: old.keys[entry], row: old.rows[entry], rowid: old.rowids[entry])
            old.seen[entry] = true
        }
        counts.unchanged += old.count
        build.add(counts, digestDelta: ContentDigest(), removed: ContentDigest())
        return old.count
    }

    /// Writes what still waits, deletes the rows the new data no longer has, then hands the table's counts and
    /// digest change to the build.
    func finish(loader: CopyLoader) throws {
        if !pending.isEmpty { try drain(try build.openDatabase(), loader: loader) }
        for entry in 0..<old.count where !old.seen[entry] {
            let s = try prepared(try build.openDatabase())
            let rowid = old.rowids[entry]
            try removed.add(rowsOf: plan.name, s.select, [.integer(rowid)])
            s.delete.bindInt64(rowid, at: 1)
            try write(s.delete, "delete")
            counts.deleted += 1
        }
        build.add(counts, digestDelta: added, removed: removed)
    }
}
