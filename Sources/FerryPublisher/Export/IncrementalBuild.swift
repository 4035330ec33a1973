import FerryCore
import FerryStore
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What an incremental build starts from: a scope's current version, its file and its row index.
struct IncrementalBase {
    let version: Int
    /// A checkpoint's `objects/<sha256>.sqlite` (never written: the build copies it), or the publisher's working
    /// copy of a step version (`.ferry-work/<dataset>/<sha256>.sqlite`), which the build takes and updates in place.
    let snapshot: URL
    /// The ``RowIndex`` of `snapshot`'s rows and rowids.
    let rowIndex: URL
    /// The version's ``ContentDigest``, which the build moves by the rows it replaces.
    let contentDigest: ContentDigest
    /// True when `snapshot` is the working copy, updated in place; false for a store object, copied first.
    var inPlace = false
}

/// Why a version cannot be built from the previous one; the export then builds it from scratch.
struct IncrementalUnavailable: Error, CustomStringConvertible {
    let description: String
}

/// How many rows an incremental build kept, rewrote, added and deleted.
public struct IncrementalCounts: Sendable, Equatable, Encodable {
    public var unchanged = 0
    public var updated = 0
    public var inserted = 0
    public var deleted = 0

    public init() {}

    /// Rows written or deleted.
    public var changed: Int { updated + inserted + deleted }

    mutating func add(_ other: IncrementalCounts) {
        unchanged += other.unchanged
        updated += other.updated
        inserted += other.inserted
        deleted += other.deleted
    }
}

/// Builds a version's file from the scope's current one plus the row diff, while PostgreSQL's rows stream past
/// the current version's ``RowIndex``. An unchanged row costs two hashes and a lookup.
///
/// The file worked on is the publisher's working copy of the current version, taken into `tmp/` and updated in
/// place (``IncrementalBase/inPlace``): an ordinary version writes the pages its changes touch and copies nothing.
/// After a checkpoint, whose file is a store object, the first difference starts a copy of it (cloned where the
/// file system can) on a thread of its own, while the rows keep streaming and the changes wait in memory.
///
/// A changed row is rewritten by rowid, a new one inserted, and at the end of each table the rows PostgreSQL no
/// longer sent are deleted, all in one transaction with a SQLite session recording the patch from the current
/// version. Each row written or deleted moves the ``ContentDigest`` (old row subtracted, new row read back and
/// added). Then the transaction is rolled back (its journal restores every page it touched) and the patch is
/// applied by ``Materializer``, exactly as a server builds the version from the previous one, so the file ends
/// byte for byte the one servers build, and the publisher records its SHA-256. Deleted content is overwritten
/// (`secure_delete`), so no old row survives in free pages. When nothing differs, no file is written at all.
///
/// Unchecked Sendable: one build belongs to one export thread (the inserting thread while a table loads, the
/// exporting thread between tables; the two never run at once).
final class IncrementalBuild: @unchecked Sendable {
    let base: IncrementalBase
    let file: URL
    /// Tables the session records (the published tables and `ferry_tables`): the patch's tables.
    let recordedTables: [String]
    private let index: RowIndexReader
    private(set) var db: SQLiteConnection?
    private var copy: ThreadJob<(FileClone.Method, Double)>?
    private let stopCopy = Locked(false)
    private var recorder: ChangeRecorder?
    private(set) var digest: ContentDigest
    private(set) var counts = IncrementalCounts()
    private(set) var cloneSeconds: Double = 0

    init(base: IncrementalBase, file: URL, plans: String, recordedTables: [String]) throws {
        self.base = base
        self.file = file
        self.recordedTables = recordedTables
        do { index = try RowIndexReader(url: base.rowIndex) } catch let error as RowIndexUnusable {
            throw IncrementalUnavailable(description: error.description)
        }
        guard index.header.plans == plans else {
            throw IncrementalUnavailable(
                description: "the template, schema or Ferry's encoding changed since version \(base.version)")
        }
        guard FileManager.default.fileExists(atPath: base.snapshot.path) else {
            throw IncrementalUnavailable(description: "version \(base.version)'s file is missing")
        }
        digest = base.contentDigest
        if base.inPlace {
            // The working copy becomes this build's file; a failed move (another file system) means a copy instead.
            taken = (try? DurableFile.rename(base.snapshot, to: file)) != nil
        }
        Self.prefetch(taken ? file : base.snapshot)
    }

    /// True when the working copy was taken into `file` (``IncrementalBase/inPlace``): ``giveBack()`` returns it.
    private(set) var taken = false
    /// True once ``materialize(_:expected:)`` started writing the file: it can no longer be given back.
    private var materializing = false

    /// Asks the kernel to read the current version's file into the page cache, on a thread of its own, so the copy
    /// started at the first difference finds more of it in memory. That costs the disk's time, hardly the CPU's,
    /// which the rows streaming in need. Measured with the file evicted first (this VM evicts cold pages within
    /// minutes): the copy took 1.0-1.1 s instead of 1.2-1.4 s, and an unchanged publish was no slower. A failure
    /// only means no prefetch.
    private static func prefetch(_ file: URL) {
        #if os(Linux)
            Thread.detachNewThread {
                let fd = open(file.path, O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else { return }
                defer { Glibc.close(fd) }
                _ = posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED)  // advice: ignoring its result loses nothing
            }
        #endif
    }

    /// The old index's hash key, which the new index keeps so the two compare.
    var hasher: RowHasher { index.hasher }

    /// The old index's entries of `table`, for its ``TableDiff``.
    func oldTable(_ table: String) throws -> IndexedTable {
        do {
            guard let old = try index.table(table) else {
                throw IncrementalUnavailable(description: "version \(base.version)'s row index has no table '\(table)'")
            }
            return old
        } catch let error as RowIndexUnusable {
            throw IncrementalUnavailable(description: error.description)
        }
    }

    /// Starts copying the current version's file on a thread of its own, once (at the first difference): the
    /// rows keep streaming meanwhile, and the changes wait in memory (``TableDiff``). A build that stops early
    /// stops the copy too (``close()``). (Started before the first row instead, the copy made an unchanged publish
    /// 12 % slower in `scripts/bench publish`, and a changed one no faster.)
    func startCopy() {
        guard db == nil, copy == nil else { return }
        let (source, target, version, stop) = (base.snapshot, file, base.version, stopCopy)
        copy = ThreadJob(name: "ferry.copy") {
            let start = ContinuousClock.now
            let method = try FileClone.clone(
                source, to: target, "cannot copy version \(version) for an incremental build",
                fix: "free space in the store (the current version is unchanged)", durable: false,
                shouldStop: { stop.withLock { $0 } })
            return (method, (ContinuousClock.now - start).inSeconds)
        }
    }

    /// The copy, open inside its transaction with the session recording; nil while it is still being made, unless
    /// `wait`.
    func database(wait: Bool = true) throws -> SQLiteConnection? {
        if let db { return db }
        if !taken {
            startCopy()
            guard let copy else { return nil }
            let copied = wait ? try copy.join() : try copy.poll()
            guard let (_, seconds) = copied else { return nil }
            self.copy = nil
            cloneSeconds = seconds
        }
        let db = try SQLiteConnection(path: file.path)
        // A file nobody else sees, fsynced before it is stored. The journal (no syncs) is what rolls the
        // transaction back, so the patch can be applied to the untouched file (``finish(metadata:)``).
        try db.execute(
            "PRAGMA journal_mode = TRUNCATE; PRAGMA synchronous = OFF; PRAGMA locking_mode = EXCLUSIVE; PRAGMA cache_size = -16384; PRAGMA secure_delete = ON"
        )
        try db.execute("BEGIN")
        recorder = try ChangeRecorder(db, tables: recordedTables)
        self.db = db
        return db
    }

    /// The copy, waiting for it.
    func openDatabase() throws -> SQLiteConnection {
        guard let db = try database(wait: true) else {
            throw IncrementalUnavailable(description: "the copy of version \(base.version) did not open")
        }
        return db
    }

    func add(_ tableCounts: IncrementalCounts, digestDelta: ContentDigest, removed: ContentDigest) {
        counts.add(tableCounts)
        digest.add(digestDelta)
        digest.subtract(removed)
    }

    /// Rewrites the metadata tables, takes the session's changeset, then rolls the transaction back: the file is the
    /// current version's again, for ``materialize(_:expected:)``. Call once, after every table.
    func finish(metadata: SnapshotMetadata) throws -> Changeset {
        let db = try openDatabase()
        try db.execute("DELETE FROM ferry_snapshot; DELETE FROM ferry_tables")
        try metadata.insertRows(into: db)
        guard let recorder else { throw IncrementalUnavailable(description: "no session") }
        let changeset = try recorder.changeset()
        self.recorder = nil
        try db.execute("ROLLBACK")
        return changeset
    }

    /// Applies `changeset` to the file as a server applies the step (``Materializer``): the file becomes version
    /// `expected`, byte for byte what a server builds from the current version, with the row counts and the content
    /// digest checked. The digest this build moved row by row must agree. Returns the rowid of every row it inserted
    /// into a table whose key is not the rowid (`diffs`' ``TableDiff/insertedKeys``), by table and row index entry.
    func materialize(_ changeset: Changeset, expected: PublishedVersion, diffs: [TableDiff]) throws -> [String: [(
        entry: Int, rowid: Int64
    )]] {
        let baseDigest = base.contentDigest.description
        // Every statement on the file first, then the connection: its exclusive lock goes with it.
        for diff in diffs { diff.releaseStatements() }
        db = nil
        materializing = true
        do {
            try Materializer.apply(changeset, to: file, expected: expected, baseDigest: baseDigest)
        } catch let error as FerryError {
            throw IncrementalUnavailable(
                description: "the step does not apply to the current version: \(error.message)")
        }
        let db = try SQLiteConnection(path: file.path, mode: .readOnly)
        var rowids: [String: [(entry: Int, rowid: Int64)]] = [:]
        for diff in diffs where !diff.insertedKeys.isEmpty {
            rowids[diff.plan.name] = try diff.rowidsOfInserted(in: db)
        }
        return rowids
    }

    /// Puts the working copy back where it was taken from, unchanged (the transaction rolled back on close): the
    /// data equalled the current version's, or the build failed before the patch was applied. A copy is removed.
    /// Returns false when the file cannot be given back (the caller removes it; the next publish rebuilds the
    /// working copy from the store).
    @discardableResult
    func giveBack() -> Bool {
        close()
        guard taken, !materializing else { return false }
        taken = false
        return (try? DurableFile.rename(file, to: base.snapshot)) != nil  // false: the caller removes the file
    }

    /// The share of the file's pages that are free after the build: rows deleted or moved leave them, and a file
    /// built again from scratch has none.
    func freeShare() throws -> Double {
        let db = try SQLiteConnection(path: file.path, mode: .readOnly)
        let pages = try db.scalar("PRAGMA page_count")?.integer ?? 0
        let free = try db.scalar("PRAGMA freelist_count")?.integer ?? 0
        return pages > 0 ? Double(free) / Double(pages) : 0
    }

    /// Closes the file (it stays for the caller to check and store); a copy still being made is stopped (within
    /// 64 MiB) and waited for, so the caller can delete what it left. An open transaction rolls back.
    func close() {
        stopCopy.withLock { $0 = true }
        _ = try? copy?.join()  // stopped or failed: the caller removes what it left, and reports its own outcome
        copy = nil
        recorder = nil
        db = nil
    }
}

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
