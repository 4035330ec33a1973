import FerryCore
import Foundation

/// Builds the next version from the live database and a row-level patch (docs/delta.md): a clone of
/// `database.db`, the patch applied inside one transaction with change capture off, the snapshot's own
/// description (`ferry_snapshot`, `ferry_origin`) moved to the new version, then verified. The caller leaves the
/// result as `updated.db` exactly as a verified download; anything that fails leaves no file behind.
///
/// Conflicts (a row that differs from what the publisher expected) mean one of two things:
/// - the device has local edits (a queue, or rows edited since the snapshot): the server's new row wins (the queue
///   is replayed on top when the update is applied, as after a full download), and a row deleted locally stays
///   deleted;
/// - the device has none: the file diverged from the version it claims. That is an error, and the caller takes
///   the full download instead; a patch never produces a wrong database.
///
/// ```swift
/// try PatchApplier.build(live: directory.database, into: scratch, patch: changeset, expected: manifest.current)
/// ```
enum PatchApplier {
    /// What an apply did.
    struct Outcome: Sendable, Equatable {
        /// Whether the copy was a clone or a plain copy.
        var copy: FileClone.Method
        /// Conflicts settled in favour of the server's row (devices with local edits only).
        var conflictsResolved: Int
        /// Whether the device had local edits (then row counts are not checked against the manifest).
        var hadLocalEdits: Bool
    }

    static func build(live: URL, into target: URL, patch: Changeset, expected: PublishedVersion) throws -> Outcome {
        do {
            return try buildOrThrow(live: live, into: target, patch: patch, expected: expected)
        } catch {
            // The half-built file must not survive; the original error says what went wrong.
            try? FileManager.default.removeItem(at: target)
            throw error
        }
    }

    private static func buildOrThrow(live: URL, into target: URL, patch: Changeset, expected: PublishedVersion) throws -> Outcome {
        try patch.validate()
        let method = try FileClone.clone(live, to: target)
        var resolved = 0
        var hadLocalEdits = false
        do {
            let db = try SQLiteConnection(path: target.path, mode: .readWrite)
            let hasOutbox = try tableExists("ferry_outbox", db)
            if hasOutbox {
                hadLocalEdits = (try db.scalar("SELECT (SELECT count(*) FROM ferry_outbox) + (SELECT count(*) FROM ferry_base)")?.integer ?? 0) > 0
            }
            let lenient = hadLocalEdits
            try db.transaction {
                if try tableExists("ferry_capture", db) { try Outbox.setCapture(false, db) }
                try patch.apply(to: db) { conflict in
                    guard lenient else { return .abort }
                    resolved += 1
                    return conflict.kind == .notFound ? .omit : .replace
                }
                let counts = try SnapshotMetadata.json(expected.tables)
                let updated = try db.run(
                    "UPDATE ferry_snapshot SET version = ?, schemaVersion = ?, createdAt = ?, tables = ?",
                    [.integer(Int64(expected.version)), .integer(Int64(expected.schemaVersion)), .text(expected.createdAt), .text(counts)])
                guard updated == 1 else {
                    throw FerryError(.verification, "the database has \(updated) ferry_snapshot rows, not one; it is not a Ferry snapshot", path: live.path)
                }
                if try tableExists("ferry_origin", db) {
                    try db.run("UPDATE ferry_origin SET sha256 = ?", [.text(expected.sha256)])
                }
                if try tableExists("ferry_capture", db) { try Outbox.setCapture(true, db) }
            }
            if !hadLocalEdits {
                for (table, rows) in expected.tables.sorted(by: { $0.key < $1.key }) {
                    let count = try db.scalar("SELECT count(*) FROM \(SQLIdentifier.quote(table))")?.integer ?? -1
                    guard count == Int64(rows) else {
                        throw FerryError(
                            .verification, "after the patch, table '\(table)' has \(count) rows but version \(expected.version) has \(rows); taking the full download",
                            path: target.path)
                    }
                }
            }
        }
        try DurableFile.sync(target)
        return Outcome(copy: method, conflictsResolved: resolved, hadLocalEdits: hadLocalEdits)
    }

    static func tableExists(_ name: String, _ db: SQLiteConnection) throws -> Bool {
        try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", [.text(name)])?.integer == 1
    }
}
