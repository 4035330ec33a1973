import CSQLite
import Foundation

/// `SQLITE_TRANSIENT`: SQLite copies bound text and blobs before the bind call returns.
@usableFromInline let sqliteTransient = unsafeBitCast(Int(-1), to: sqlite3_destructor_type.self)

/// A single SQLite connection: a thin, fast wrapper over the C API with bound parameters only.
///
/// One owner per file (GRDB's rule): a connection is not `Sendable`; keep it inside one actor or task.
///
/// ```swift
/// let db = try SQLiteConnection(path: "/tmp/x.db")
/// try db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT)")
/// try db.run("INSERT INTO t(name) VALUES (?)", ["Växjö"])
/// let rows = try db.query("SELECT id, name FROM t")
/// ```
public final class SQLiteConnection {
    public enum OpenMode: Sendable {
        /// Reads only. A hot journal (a writer was killed inside a transaction) is still rolled back first, which
        /// needs a read-write handle: SQLite refuses to read such a file read-only (`SQLITE_READONLY_ROLLBACK`),
        /// and the rollback is what restores the last committed state.
        case readOnly
        case readWrite
        case readWriteCreate
    }

    public let path: String
    @usableFromInline let handle: OpaquePointer
    /// False for a connection that wraps a handle someone else owns (``init(borrowing:path:)``): it is not closed here.
    private let ownsHandle: Bool
    /// Statements of ``run(_:_:)``, ``query(_:_:)`` and ``scalar(_:_:)`` by their SQL, prepared once per connection:
    /// the outbox runs the same few statements per row, and each prepare of a write compiles the table's triggers
    /// (on an app's GRDB connection, through GRDB's authorizer too). Each is reset after use, so none stays active.
    /// Released (finalized) with the connection.
    private var statementCache: [String: SQLiteStatement] = [:]

    public init(path: String, mode: OpenMode = .readWriteCreate) throws {
        self.path = path
        let flags: Int32
        switch mode {
        case .readOnly: flags = SQLITE_OPEN_READONLY
        case .readWrite: flags = SQLITE_OPEN_READWRITE
        case .readWriteCreate: flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
        }
        var handle = try Self.open(path, flags: flags)
        if mode == .readOnly, Self.needsRecovery(handle) {
            sqlite3_close_v2(handle)
            handle = try Self.open(path, flags: SQLITE_OPEN_READWRITE)
        }
        self.handle = handle
        self.ownsHandle = true
    }

    /// Wraps a connection that another library opened and owns (GRDB's writer, for instance), so that Ferry's code
    /// can run on it. The handle is never closed here; it must outlive this object, which must be used only where
    /// the owner allows (on its writer queue).
    ///
    /// ```swift
    /// try pool.writeWithoutTransaction { db in
    ///     let connection = SQLiteConnection(borrowing: db.sqliteConnection!, path: pool.path)
    /// }
    /// ```
    public init(borrowing handle: OpaquePointer, path: String) {
        self.path = path
        self.handle = handle
        self.ownsHandle = false
    }

    /// The underlying `sqlite3 *`, for C APIs this wrapper does not cover (the backup API, say).
    public var rawHandle: OpaquePointer { handle }

    private static func open(_ path: String, flags: Int32) throws -> OpaquePointer {
        var db: OpaquePointer?
        let rc = sqlite3_open_v2(path, &db, flags | SQLITE_OPEN_NOMUTEX, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            if let db { sqlite3_close_v2(db) }
            throw FerryError(.sqlite, "cannot open SQLite database: \(message)", path: path)
        }
        sqlite3_busy_timeout(db, 5000)
        sqlite3_extended_result_codes(db, 1)
        return db
    }

    /// Whether a read-only handle meets a hot journal or WAL it may not recover. Other failures (not a database, a
    /// damaged page) are left to the statement that meets them, with its own message.
    private static func needsRecovery(_ db: OpaquePointer) -> Bool {
        let rc = sqlite3_exec(db, "SELECT 1 FROM sqlite_master LIMIT 1", nil, nil, nil)
        // SQLITE_READONLY_RECOVERY and SQLITE_READONLY_ROLLBACK: C macros Swift does not import.
        return rc == SQLITE_READONLY | (1 << 8) || rc == SQLITE_READONLY | (3 << 8)
    }

    deinit {
        if ownsHandle { sqlite3_close_v2(handle) }
    }

    /// The last error message SQLite reported on this connection.
    public var lastErrorMessage: String { String(cString: sqlite3_errmsg(handle)) }

    func error(_ what: String, sql: String? = nil) -> FerryError {
        var message = "\(what): \(lastErrorMessage)"
        if let sql { message += " in \(sql.prefix(200))" }
        let code = sqlite3_extended_errcode(handle)
        if code == SQLITE_FULL { message += "; the disk is full: free space and try again" }
        return FerryError(.sqlite, message, path: path)
    }

    /// Runs one or more statements without parameters.
    public func execute(_ sql: String) throws {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        if rc != SQLITE_OK {
            let text = errorMessage.map { String(cString: $0) } ?? lastErrorMessage
            sqlite3_free(errorMessage)
            var message = "\(text) in \(sql.prefix(200))"
            if sqlite3_extended_errcode(handle) == SQLITE_FULL {
                message += "; the disk is full: free space and try again"
            }
            throw FerryError(.sqlite, message, path: path)
        }
    }

    /// Prepares a statement for repeated use.
    public func prepare(_ sql: String) throws -> SQLiteStatement {
        var stmt: OpaquePointer?
        var trailing = false
        let rc = sql.withCString { text -> Int32 in
            var tail: UnsafePointer<CChar>?
            let rc = sqlite3_prepare_v2(handle, text, -1, &stmt, &tail)
            if let tail {
                var p = tail
                while p.pointee != 0
                    && (p.pointee == 32 || p.pointee == 10 || p.pointee == 9 || p.pointee == 13 || p.pointee == 59)
                { p += 1 }
                trailing = p.pointee != 0
            }
            return rc
        }
        guard rc == SQLITE_OK, let stmt else {
            throw error("cannot prepare statement", sql: sql)
        }
        return SQLiteStatement(connection: self, handle: stmt, sql: sql, hasTrailingSQL: trailing)
    }

    /// Runs one statement with bound parameters and returns the number of changed rows.
    @discardableResult
    public func run(_ sql: String, _ parameters: [SQLiteValue] = []) throws -> Int {
        try withCachedStatement(sql, parameters) { stmt in
            while try stmt.step() {}
            return Int(sqlite3_changes(handle))
        }
    }

    /// Runs a query with bound parameters and returns every row.
    public func query(_ sql: String, _ parameters: [SQLiteValue] = []) throws -> [[SQLiteValue]] {
        try withCachedStatement(sql, parameters) { stmt in
            var rows: [[SQLiteValue]] = []
            while try stmt.step() {
                rows.append((0..<stmt.columnCount).map { stmt.value(at: $0) })
            }
            return rows
        }
    }

    /// Runs a query and returns the first column of the first row, if any.
    public func scalar(_ sql: String, _ parameters: [SQLiteValue] = []) throws -> SQLiteValue? {
        try withCachedStatement(sql, parameters) { stmt in
            guard try stmt.step() else { return nil }
            return stmt.value(at: 0)
        }
    }

    /// Runs `body` with the cached statement for `sql`, `parameters` bound, and resets it afterwards (bindings
    /// cleared) whatever happens. A statement already in use (a nested call with the same SQL) gets a fresh one.
    private func withCachedStatement<T>(
        _ sql: String, _ parameters: [SQLiteValue], _ body: (SQLiteStatement) throws -> T
    ) throws -> T {
        let stmt: SQLiteStatement
        if let cached = statementCache.removeValue(forKey: sql) {
            stmt = cached
        } else {
            stmt = try prepare(sql)
        }
        defer {
            stmt.resetForReuse()
            if statementCache.count < 64 { statementCache[sql] = stmt }
        }
        try stmt.bind(parameters)
        return try body(stmt)
    }

    /// Runs `body` in a transaction: commits on success, rolls back on error.
    public func transaction<T>(_ kind: String = "IMMEDIATE", _ body: () throws -> T) throws -> T {
        if isInsideTransaction {
            // Already inside a transaction (an app's GRDB write hands Ferry its writer mid-transaction): a savepoint
            // makes `body` all-or-nothing within it, and the owner's COMMIT makes it durable.
            return try enclosing(
                body, begin: "SAVEPOINT ferry_transaction", commit: "RELEASE ferry_transaction",
                rollback: "ROLLBACK TO ferry_transaction; RELEASE ferry_transaction")
        }
        return try enclosing(body, begin: "BEGIN \(kind)", commit: "COMMIT", rollback: "ROLLBACK")
    }

    /// Runs `body` between `begin` and `commit`, or `rollback` when it throws.
    private func enclosing<T>(_ body: () throws -> T, begin: String, commit: String, rollback: String) throws -> T {
        try execute(begin)
        do {
            let result = try body()
            try execute(commit)
            return result
        } catch {
            // The body's error is the one to report; a failed rollback leaves nothing committed either (inside a
            // savepoint, the owner's transaction fails).
            try? execute(rollback)
            throw error
        }
    }

    /// Whether a transaction is open on this connection (SQLite is not in autocommit mode).
    public var isInsideTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    /// The rowid of the last insert.
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// Number of rows changed by the last statement.
    public var changes: Int { Int(sqlite3_changes(handle)) }

    /// Runs `PRAGMA integrity_check` (or `quick_check` when `quick`) and throws unless it answers "ok".
    public func checkIntegrity(quick: Bool = false) throws {
        let pragma = quick ? "quick_check" : "integrity_check"
        let rows: [[SQLiteValue]]
        do {
            rows = try query("PRAGMA \(pragma)")
        } catch {
            throw FerryError(.verification, "not a valid SQLite database: \(error)", path: path)
        }
        guard rows.count == 1, case .text("ok") = rows[0].first else {
            let problems = rows.prefix(5).compactMap { $0.first?.text }.joined(separator: "; ")
            throw FerryError(.verification, "\(pragma) failed: \(problems)", path: path)
        }
    }
}

/// A value read from or bound to SQLite.
public enum SQLiteValue: Hashable, Sendable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])

    public var text: String? { if case .text(let s) = self { return s } else { return nil } }
    public var integer: Int64? { if case .integer(let v) = self { return v } else { return nil } }
}

extension SQLiteValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByNilLiteral,
    ExpressibleByFloatLiteral
{
    public init(stringLiteral value: String) { self = .text(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(nilLiteral: ()) { self = .null }
    public init(floatLiteral value: Double) { self = .real(value) }
}

/// A prepared statement. Reset and rebind it to run it again: the hot path of loading a snapshot.
public final class SQLiteStatement {
    public unowned let connection: SQLiteConnection
    @usableFromInline let handle: OpaquePointer
    public let sql: String
    /// True when `sql` held more text after the first statement (only the first one was prepared).
    public let hasTrailingSQL: Bool

    init(connection: SQLiteConnection, handle: OpaquePointer, sql: String, hasTrailingSQL: Bool) {
        self.connection = connection
        self.handle = handle
        self.sql = sql
        self.hasTrailingSQL = hasTrailingSQL
    }

    deinit { sqlite3_finalize(handle) }

    /// Ends the statement's run (no longer active: it holds no lock) and clears its bindings.
    func resetForReuse() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    public var parameterCount: Int { Int(sqlite3_bind_parameter_count(handle)) }
    public var columnCount: Int { Int(sqlite3_column_count(handle)) }
    public func columnName(_ index: Int) -> String { String(cString: sqlite3_column_name(handle, Int32(index))) }

    /// Binds values to parameters 1...n.
    public func bind(_ values: [SQLiteValue]) throws {
        for (i, value) in values.enumerated() { try bind(value, at: i + 1) }
    }

    /// Binds one value to the 1-based parameter `index`.
    public func bind(_ value: SQLiteValue, at index: Int) throws {
        let i = Int32(index)
        let rc: Int32
        switch value {
        case .null: rc = sqlite3_bind_null(handle, i)
        case .integer(let v): rc = sqlite3_bind_int64(handle, i, v)
        case .real(let v): rc = sqlite3_bind_double(handle, i, v)
        case .text(let s): rc = sqlite3_bind_text(handle, i, s, -1, sqliteTransient)
        case .blob(let b):
            rc = b.withUnsafeBytes { sqlite3_bind_blob(handle, i, $0.baseAddress, Int32($0.count), sqliteTransient) }
        }
        guard rc == SQLITE_OK else { throw connection.error("cannot bind parameter \(index)", sql: sql) }
    }

    @inlinable public func bindInt64(_ value: Int64, at index: Int32) { sqlite3_bind_int64(handle, index, value) }
    @inlinable public func bindDouble(_ value: Double, at index: Int32) { sqlite3_bind_double(handle, index, value) }
    @inlinable public func bindNull(at index: Int32) { sqlite3_bind_null(handle, index) }

    /// Steps once: true when a row is available, false when done.
    @discardableResult
    public func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw connection.error("statement failed", sql: sql)
        }
    }

    /// Resets the statement and clears its bindings so it can run again.
    public func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Reads column `index` of the current row.
    public func value(at index: Int) -> SQLiteValue {
        let i = Int32(index)
        switch sqlite3_column_type(handle, i) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(handle, i))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(handle, i))
        case SQLITE_TEXT:
            let count = Int(sqlite3_column_bytes(handle, i))
            guard let p = sqlite3_column_text(handle, i) else { return .text("") }
            return .text(String(decoding: UnsafeBufferPointer(start: p, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(handle, i))
            guard let p = sqlite3_column_blob(handle, i) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: p, count: count)))
        default: return .null
        }
    }
}
