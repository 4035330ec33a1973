import CSQLite

extension SQLiteConnection {
    /// Replaces this database's whole contents with `source`'s, with SQLite's online backup API, as one write
    /// transaction: a reader of this database (WAL) goes on seeing the version it started with, and a crash part
    /// way leaves this database as it was. Both files must have the same page size when this one is in WAL mode
    /// (SQLite refuses otherwise, and so does this, with the reason).
    ///
    /// ```swift
    /// try live.replaceContents(from: SQLiteConnection(path: updated.path, mode: .readOnly))
    /// ```
    public func replaceContents(from source: SQLiteConnection) throws {
        guard let backup = sqlite3_backup_init(handle, "main", source.handle, "main") else {
            throw error("cannot start copying \(source.path) into the database")
        }
        var rc = SQLITE_OK
        repeat {
            rc = sqlite3_backup_step(backup, -1)
            if rc == SQLITE_BUSY || rc == SQLITE_LOCKED { sqlite3_sleep(5) }
        } while rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED
        let finish = sqlite3_backup_finish(backup)
        guard rc == SQLITE_DONE, finish == SQLITE_OK else {
            var message =
                "cannot copy \(source.path) into the database: \(String(cString: sqlite3_errstr(rc == SQLITE_DONE ? finish : rc)))"
            if rc == SQLITE_READONLY || finish == SQLITE_READONLY {
                message += " (a WAL database takes a copy only from a file of the same page size)"
            }
            throw FerryError(.sqlite, message, path: path)
        }
    }

    /// Writes a consistent copy of this database (as of its last commit, or of the open transaction on this
    /// connection) to `target`, which is created or overwritten. The caller makes it durable and renames it.
    ///
    /// ```swift
    /// try live.copy(to: scratch.path)
    /// ```
    public func copy(to target: String) throws {
        let destination = try SQLiteConnection(path: target, mode: .readWriteCreate)
        try destination.replaceContents(from: self)
        // The copy carries the source's header; a copy of a WAL database is a plain file of its own.
        if try destination.scalar("PRAGMA journal_mode")?.text == "wal" {
            try destination.execute("PRAGMA journal_mode=DELETE")
        }
    }
}
