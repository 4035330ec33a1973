import CSQLite

/// Whether the SQLite linked into this process has the session extension, which patches (``Changeset``) need: an app
/// that bundles its own SQLite (SQLCipher, a GRDB custom build) must compile it with `SQLITE_ENABLE_SESSION` and
/// `SQLITE_ENABLE_PREUPDATE_HOOK` (docs/client.md). Debian's libsqlite3 and Apple's system SQLite have both.
///
/// ```swift
/// try SessionExtension.require()   // FerryClient.open does this once
/// ```
public enum SessionExtension {
    /// The compile options missing from the linked SQLite, empty when it has both; asked once per process. A build
    /// that does not list them among its compile options (a vendor's SQLite may not) still passes when a session
    /// can be created and records a change: that is what patches use.
    public static let missingOptions: [String] = {
        let listed = ["ENABLE_SESSION", "ENABLE_PREUPDATE_HOOK"].filter { (option: String) in
            sqlite3_compileoption_used(option) == 0
        }
        return listed.isEmpty || sessionWorks() ? [] : listed
    }()

    /// Creates a session on an in-memory database, writes one row and asks for its changeset.
    private static func sessionWorks() -> Bool {
        var db: OpaquePointer?
        guard sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil) == SQLITE_OK, let db
        else { return false }
        defer { sqlite3_close_v2(db) }
        guard sqlite3_exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY)", nil, nil, nil) == SQLITE_OK else {
            return false
        }
        var session: OpaquePointer?
        guard sqlite3session_create(db, "main", &session) == SQLITE_OK, let session else { return false }
        defer { sqlite3session_delete(session) }
        guard sqlite3session_attach(session, nil) == SQLITE_OK,
            sqlite3_exec(db, "INSERT INTO t VALUES (1)", nil, nil, nil) == SQLITE_OK
        else { return false }
        var size: Int32 = 0
        var changes: UnsafeMutableRawPointer?
        let rc = sqlite3session_changeset(session, &size, &changes)
        sqlite3_free(changes)
        return rc == SQLITE_OK && size > 0
    }

    /// Throws a ``FerryError`` (code `sqlite`) naming the missing compile options and the fix, when there are any.
    public static func require() throws {
        guard missingOptions.isEmpty else {
            throw FerryError(
                .sqlite,
                "the SQLite linked into this app (\(String(cString: sqlite3_libversion()))) was compiled without \(missingOptions.map { "SQLITE_\($0)" }.joined(separator: " and ")); Ferry's patches need the session extension: build the bundled SQLite with -DSQLITE_ENABLE_SESSION -DSQLITE_ENABLE_PREUPDATE_HOOK, or use the system's",
                key: "SQLITE_ENABLE_SESSION")
        }
    }
}
