import CSQLite
import Foundation

/// Records what is written through one connection to some tables (a SQLite session) and hands it back as a
/// ``Changeset``: the patch from the database as it was when recording began to the database as it is. A row
/// deleted and inserted again with the same primary key is one update; a row changed back to its old values is
/// no change at all.
///
/// ```swift
/// let recorder = try ChangeRecorder(db, tables: ["trips", "ferry_tables"])
/// try db.execute("UPDATE trips SET name = 'x' WHERE id = 1")
/// let patch = try recorder.changeset()
/// ```
public final class ChangeRecorder {
    private let db: SQLiteConnection
    private let session: OpaquePointer

    /// Starts recording `tables` of the main database; each must have a primary key (changes to a table without
    /// one are not recorded, as SQLite's session extension does).
    public init(_ db: SQLiteConnection, tables: [String]) throws {
        self.db = db
        var session: OpaquePointer?
        guard sqlite3session_create(db.handle, "main", &session) == SQLITE_OK, let session else {
            throw db.error("cannot start a SQLite session (is the session extension compiled in?)")
        }
        self.session = session
        for table in tables where sqlite3session_attach(session, table) != SQLITE_OK {
            throw db.error("cannot record changes to table '\(table)'")
        }
    }

    deinit { sqlite3session_delete(session) }

    /// The changes recorded so far.
    public func changeset() throws -> Changeset {
        var size: Int32 = 0
        var bytes: UnsafeMutableRawPointer?
        guard sqlite3session_changeset(session, &size, &bytes) == SQLITE_OK else {
            throw db.error("cannot build the changeset")
        }
        defer { sqlite3_free(bytes) }
        return Changeset(data: bytes.map { Data(bytes: $0, count: Int(size)) } ?? Data())
    }
}
