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
    /// True once ``materialize(_:expected:diffs:)`` started writing the file: it can no longer be given back.
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
    /// current version's again, for ``materialize(_:expected:diffs:)``. Call once, after every table.
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
        removeJournal()  // the build's connection is closed: its transaction rolled back before the step applied
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
        // The transaction rolled back: its journal is truncated, or the file cannot be trusted as it was.
        guard removeJournal(), taken, !materializing else { return false }
        taken = false
        // A failed rename answers false: the caller removes the file, and the next publish rebuilds the working copy.
        return (try? DurableFile.rename(file, to: base.snapshot)) != nil
    }

    /// Removes the build's rollback journal (`<file>-journal`) once its transaction ended: truncated to nothing, it
    /// holds no page. Returns false when it still holds some (a transaction not rolled back), and leaves it.
    @discardableResult
    func removeJournal() -> Bool {
        let journal = URL(fileURLWithPath: file.path + "-journal")
        // No size means no journal: the build never opened a transaction.
        guard let size = try? FileSnapshotStore.fileSize(journal) else { return true }
        guard size == 0 else { return false }
        // An empty journal left behind is harmless: the next run clears tmp/.
        return (try? DurableFile.remove(journal)) != nil
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
