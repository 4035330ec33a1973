import Foundation

/// Builds a published version's file from the previous version's file and the step patch between them, byte for
/// byte the same wherever it runs (docs/delta.md, "Checkpoints and steps"). The publisher builds each ordinary
/// version this way and records the result's SHA-256; a server or bucket replica later repeats the same steps from
/// the nearest checkpoint and checks that SHA-256 before it serves the file.
///
/// The bytes are the same because every step is the same: one connection with the same pragmas, one transaction,
/// the changeset applied in its own order (any conflict aborts: the base must be exactly the version the step was
/// made from), `ferry_snapshot` moved to the new version, and nothing else. The content digest is moved by the rows
/// the step touches and checked with the row counts before the file is accepted.
///
/// ```swift
/// try FileClone.clone(previous, to: scratch, "cannot copy", fix: "free space")
/// try Materializer.apply(step, to: scratch, expected: record.published, baseDigest: previousRecord.contentDigest)
/// ```
public enum Materializer {
    /// Applies `step` to `file` (a private copy of the base version's file) and moves its `ferry_snapshot` to
    /// `expected`, then checks row counts and the content digest (moved from `baseDigest` when both versions record
    /// one, else computed in full). The file is fsynced. On any error the file is left as it is: the caller's
    /// scratch, to delete.
    public static func apply(_ step: Changeset, to file: URL, expected: PublishedVersion, baseDigest: String?) throws {
        _ = try step.validate()
        do {
            let db = try SQLiteConnection(path: file.path, mode: .readWrite)
            // Scratch until it is verified and renamed: no journal, no syncs of its own; one fsync at the end.
            // secure_delete as the publisher's builds: no deleted value survives in a free page.
            try db.execute("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA secure_delete = ON")
            var digest: ContentDigest?
            var touched: [String: Changeset.TouchedRows] = [:]
            if expected.contentDigest != nil, let base = baseDigest.flatMap(ContentDigest.init(hex:)) {
                touched = try step.touchedRows().filter { expected.tables[$0.key] != nil }
                digest = base
            }
            try db.transaction {
                if digest != nil { digest!.subtract(try ContentDigest.of(touched, in: db)) }
                try step.apply(to: db) { _ in .abort }
                if digest != nil { digest!.add(try ContentDigest.of(touched, in: db)) }
                try moveSnapshot(db, to: expected)
            }
            try verifyContent(db, expected: expected, movedDigest: digest, file: file)
        }
        try DurableFile.sync(file)
    }

    /// Moves the one `ferry_snapshot` row to `expected`'s version, schema version, time and row counts.
    public static func moveSnapshot(_ db: SQLiteConnection, to expected: PublishedVersion) throws {
        let counts = try SnapshotMetadata.json(expected.tables)
        let updated = try db.run(
            "UPDATE ferry_snapshot SET version = ?, schemaVersion = ?, createdAt = ?, tables = ?",
            [
                .integer(Int64(expected.version)), .integer(Int64(expected.schemaVersion)), .text(expected.createdAt),
                .text(counts),
            ])
        guard updated == 1 else {
            throw FerryError(
                .verification, "the database has \(updated) ferry_snapshot rows, not one; it is not a Ferry snapshot",
                path: db.path)
        }
    }

    /// The rows must be exactly the published ones: the row counts, then the content digest (when the version
    /// records one), moved from the base's (`movedDigest`) or computed in full.
    public static func verifyContent(
        _ db: SQLiteConnection, expected: PublishedVersion, movedDigest: ContentDigest?, file: URL
    ) throws {
        for (table, rows) in expected.tables.sorted(by: { $0.key < $1.key }) {
            let count = try db.scalar("SELECT count(*) FROM \(SQLIdentifier.quote(table))")?.integer ?? -1
            guard count == Int64(rows) else {
                throw FerryError(
                    .verification,
                    "after the patch, table '\(table)' has \(count) rows but version \(expected.version) has \(rows)",
                    path: file.path)
            }
        }
        guard let published = expected.contentDigest else { return }
        let digest = try movedDigest ?? ContentDigest.compute(db, tables: Array(expected.tables.keys))
        guard digest.description == published else {
            throw FerryError(
                .verification,
                "after the patch, the rows' content digest is \(digest) but version \(expected.version) has \(published): the database diverged from the version it claims",
                path: file.path)
        }
    }
}
