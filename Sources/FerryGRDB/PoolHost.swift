import FerryClient
import FerryCore
import GRDB

/// The app's `DatabasePool`, lent to `FerryClient` (`LiveDatabaseHost`): Ferry's work runs on the pool's
/// writer, serialized with the app's writes and off Swift's cooperative threads (GRDB's writer queue), and GRDB's
/// observers learn of what Ferry changed, which GRDB cannot see on its own (statements it did not compile, SQLite's
/// backup API).
struct PoolHost: LiveDatabaseHost {
    let pool: DatabasePool

    func write<T: Sendable>(notify: Bool, _ body: @escaping @Sendable (FerryCore.SQLiteConnection) throws -> T)
        async throws -> T
    {
        let path = pool.path
        return try await pool.write { db in
            let result = try body(try Self.borrow(db, path: path))
            // Ferry's statements may create its tables and triggers: GRDB reads the schema again when it needs it.
            db.clearSchemaCache()
            if notify { try db.notifyChanges(in: .fullDatabase) }
            return result
        }
    }

    func replace<T: Sendable>(_ body: @escaping @Sendable (FerryCore.SQLiteConnection) throws -> T) async throws -> T {
        let path = pool.path
        return try await pool.writeWithoutTransaction { db in
            let result = Result { try body(try Self.borrow(db, path: path)) }
            // Whatever `body` did (even part of it, before an error), GRDB must forget the old schema and its observers
            // must look again: the notification is delivered when this empty transaction commits.
            db.clearSchemaCache()
            try db.inTransaction {
                try db.notifyChanges(in: .fullDatabase)
                return .commit
            }
            return try result.get()
        }
    }

    private static func borrow(_ db: Database, path: String) throws -> FerryCore.SQLiteConnection {
        guard let handle = db.sqliteConnection else {
            throw FerryError(.sqlite, "the app's database is closed", path: path)
        }
        return FerryCore.SQLiteConnection(borrowing: handle, path: path)
    }
}
