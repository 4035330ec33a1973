import CSQLite
import Foundation

/// A SQLite session changeset: the row-level difference between two snapshots of the same schema, in SQLite's own
/// documented format (https://www.sqlite.org/sessionintro.html). Inserts carry the new row, deletes the old row,
/// updates the primary key plus the old and new values of the changed columns, so applying it can tell a row that
/// differs from what the publisher saw (a conflict) from one that matches.
///
/// ```swift
/// let patch = try Changeset.diff(from: v1File, to: v2File, tables: ["trips"])
/// try db.transaction { try patch.apply(to: db) { conflict in .abort } }
/// ```
public struct Changeset: Sendable, Equatable {
    /// The changeset's bytes.
    public let data: Data

    public init(data: Data) {
        self.data = data
    }

    /// True when the two databases held the same rows.
    public var isEmpty: Bool { data.isEmpty }

    /// The changes that turn the `tables` of the database at `old` into those of the database at `new`. Both files
    /// are opened read-only; a table must have a primary key (Ferry's always do) and the same columns in both.
    /// With `patchset`, SQLite's patchset format: new values only, no old values to detect a conflict with
    /// (`scripts/bench delta` measures its size beside the changeset's; Ferry ships changesets, docs/delta.md).
    public static func diff(from old: URL, to new: URL, tables: [String], patchset: Bool = false) throws -> Changeset {
        let db = try SQLiteConnection(path: new.path, mode: .readOnly)
        _ = try db.run("ATTACH DATABASE ? AS ferry_old", [.text(old.path)])
        var session: OpaquePointer?
        guard sqlite3session_create(db.handle, "main", &session) == SQLITE_OK, let session else {
            throw db.error("cannot start a SQLite session (is the session extension compiled in?)")
        }
        defer { sqlite3session_delete(session) }
        // SQLite 3.40 returns an empty diff unless the tables are attached to the session first.
        guard sqlite3session_attach(session, nil) == SQLITE_OK else {
            throw db.error("cannot attach tables to the session")
        }
        for table in tables {
            var message: UnsafeMutablePointer<CChar>?
            let rc = sqlite3session_diff(session, "ferry_old", table, &message)
            if rc != SQLITE_OK {
                let text = message.map { String(cString: $0) } ?? db.lastErrorMessage
                sqlite3_free(message)
                throw FerryError(
                    .sqlite, "cannot diff table '\(table)' against \(old.lastPathComponent): \(text)", path: new.path)
            }
        }
        var size: Int32 = 0
        var bytes: UnsafeMutableRawPointer?
        let rc =
            patchset
            ? sqlite3session_patchset(session, &size, &bytes) : sqlite3session_changeset(session, &size, &bytes)
        guard rc == SQLITE_OK else { throw db.error("cannot build the changeset") }
        defer { sqlite3_free(bytes) }
        return Changeset(data: bytes.map { Data(bytes: $0, count: Int(size)) } ?? Data())
    }

    /// `parts` applied one after another, as one changeset (`sqlite3changegroup`): a row changed in several parts
    /// appears once, with its first old and last new values.
    public static func combine(_ parts: [Changeset]) throws -> Changeset {
        var group: OpaquePointer?
        guard sqlite3changegroup_new(&group) == SQLITE_OK, let group else {
            throw FerryError(.sqlite, "cannot create a SQLite changegroup")
        }
        defer { sqlite3changegroup_delete(group) }
        for (index, part) in parts.enumerated() where !part.isEmpty {
            do { try part.validate() } catch let error as FerryError {
                throw FerryError(.verification, "changeset \(index + 1) of \(parts.count): \(error.message)")
            }
            var copy = part.data
            let rc = copy.withUnsafeMutableBytes { raw in
                sqlite3changegroup_add(group, Int32(raw.count), raw.baseAddress)
            }
            guard rc == SQLITE_OK else {
                throw FerryError(
                    .verification, "changeset \(index + 1) of \(parts.count) is malformed (SQLite error \(rc))")
            }
        }
        var size: Int32 = 0
        var bytes: UnsafeMutableRawPointer?
        guard sqlite3changegroup_output(group, &size, &bytes) == SQLITE_OK else {
            throw FerryError(.sqlite, "cannot combine changesets")
        }
        defer { sqlite3_free(bytes) }
        return Changeset(data: bytes.map { Data(bytes: $0, count: Int(size)) } ?? Data())
    }

    /// Reads every change once and checks the changeset is well formed (SQLite's own reader: a truncated or
    /// corrupt changeset fails). Returns the number of changes.
    @discardableResult
    public func validate() throws -> Int {
        guard !isEmpty else { return 0 }
        var copy = data
        return try copy.withUnsafeMutableBytes { raw -> Int in
            var iterator: OpaquePointer?
            guard sqlite3changeset_start(&iterator, Int32(raw.count), raw.baseAddress) == SQLITE_OK, let iterator else {
                throw FerryError(.verification, "the changeset is malformed: it cannot be read")
            }
            var count = 0
            var rc = sqlite3changeset_next(iterator)
            while rc == SQLITE_ROW {
                count += 1
                rc = sqlite3changeset_next(iterator)
            }
            let finalized = sqlite3changeset_finalize(iterator)
            guard rc == SQLITE_DONE, finalized == SQLITE_OK else {
                throw FerryError(
                    .verification,
                    "the changeset is malformed (SQLite error \(rc == SQLITE_DONE ? finalized : rc) after \(count) changes)"
                )
            }
            return count
        }
    }

    /// What the rows of a table looked like to the changeset when it was applied.
    public enum ConflictKind: Sendable, Equatable {
        /// The row exists but its values are not the changeset's old values (an update or delete).
        case data
        /// The row to update or delete does not exist.
        case notFound
        /// A row with the inserted primary key exists already.
        case conflict
        /// A constraint failed.
        case constraint
        /// Foreign keys are violated at the end.
        case foreignKey
    }

    /// One conflict: which table and what kind.
    public struct Conflict: Sendable, Equatable {
        public var table: String
        public var kind: ConflictKind

        public init(table: String, kind: ConflictKind) {
            self.table = table
            self.kind = kind
        }
    }

    /// What to do about a conflict.
    public enum Resolution: Sendable {
        /// Skip this change.
        case omit
        /// Write the changeset's row over the local one (only for `.data` and `.conflict`).
        case replace
        /// Stop and roll back what the apply did.
        case abort
    }

    /// Applies the changeset to `db` (within the caller's transaction, if any: SQLite wraps it in a savepoint).
    /// `resolve` decides each conflict; an `.abort` undoes the whole apply and throws `.verification`.
    public func apply(to db: SQLiteConnection, resolve: (Conflict) -> Resolution) throws {
        final class Context {
            let resolve: (Conflict) -> Resolution
            var aborted: Conflict?
            init(_ resolve: @escaping (Conflict) -> Resolution) { self.resolve = resolve }
        }
        try withoutActuallyEscaping(resolve) { resolve in
            let context = Context(resolve)
            let pointer = Unmanaged.passUnretained(context).toOpaque()
            var copy = data
            let rc = copy.withUnsafeMutableBytes { raw -> Int32 in
                sqlite3changeset_apply_v2(
                    db.handle, Int32(raw.count), raw.baseAddress, nil,
                    { pointer, reason, iterator in
                        let context = Unmanaged<Context>.fromOpaque(pointer!).takeUnretainedValue()
                        var table: UnsafePointer<CChar>?
                        var columns: Int32 = 0
                        var op: Int32 = 0
                        var indirect: Int32 = 0
                        sqlite3changeset_op(iterator, &table, &columns, &op, &indirect)
                        let kind: ConflictKind
                        switch reason {
                        case SQLITE_CHANGESET_DATA: kind = .data
                        case SQLITE_CHANGESET_NOTFOUND: kind = .notFound
                        case SQLITE_CHANGESET_CONFLICT: kind = .conflict
                        case SQLITE_CHANGESET_FOREIGN_KEY: kind = .foreignKey
                        default: kind = .constraint
                        }
                        let conflict = Conflict(table: table.map { String(cString: $0) } ?? "", kind: kind)
                        switch context.resolve(conflict) {
                        case .omit: return SQLITE_CHANGESET_OMIT
                        case .replace where kind == .data || kind == .conflict: return SQLITE_CHANGESET_REPLACE
                        case .replace, .abort:
                            context.aborted = conflict
                            return SQLITE_CHANGESET_ABORT
                        }
                    }, pointer, nil, nil, 0)
            }
            if let conflict = context.aborted {
                throw FerryError(
                    .verification,
                    "the patch does not fit this database: a \(conflict.kind) conflict in table '\(conflict.table)'; nothing was changed",
                    path: db.path)
            }
            guard rc == SQLITE_OK else { throw db.error("cannot apply the patch") }
        }
    }
}
