import FerryCore
import Foundation

/// Composes a partitioned device's database from its streams' verified files: the shared stream's file (its schema,
/// its metadata, its shared tables' rows), then table by table the rows of every subscribed partition's file, then
/// the rows of partitions being left that queued edits of the live database still name. Every stream file has every
/// table of the dataset (the tables not in the stream are empty), so a composition is `INSERT … SELECT` per table.
/// The result is written to a scratch file and synced; the caller installs it as any verified download (the swap,
/// the outbox replayed on top). Blocking: run it on ``BlockingWork``.
///
/// ```swift
/// let composed = try PartitionComposer(shared: sharedFile, partitions: [p1, p7], leaving: [p3], live: database,
///                                      keys: ["1", "7"], layout: layout).compose(into: scratch)
/// ```
struct PartitionComposer {
    /// The shared stream's file.
    var shared: URL
    /// The subscribed partitions' files (those downloaded so far).
    var partitions: [URL]
    /// The files of partitions being left, by key: only their rows named by queued edits are kept.
    var leaving: [String: URL]
    /// The live database, whose outbox names the rows to keep; nil (or missing) before the initial sync.
    var live: URL?
    /// The subscribed keys: a device insert must name one of them (checked by triggers inside the file).
    var keys: [String]
    var layout: PartitionLayout

    /// What a composition did.
    struct Outcome: Sendable, Equatable {
        /// Rows kept per leaving key because a queued edit names them (a key with 0 can be dropped).
        var held: [String: Int]
        /// The composed file's rows.
        var rows: Int
    }

    /// Writes the composition to `target` (replaced), synced. What fails removes `target` and is thrown.
    func compose(into target: URL) throws -> Outcome {
        try FileClone.clone(
            shared, to: target, "cannot copy the shared stream to compose database.db",
            fix: "free space and fetch again (database.db is unchanged)", durable: false)
        do {
            let outcome = try fill(target)
            try DurableFile.sync(target)
            return outcome
        } catch {
            // The composition's error is the one to report; the scratch file is also removed on the next open.
            try? FileManager.default.removeItem(at: target)
            throw error
        }
    }

    private func fill(_ target: URL) throws -> Outcome {
        let db = try SQLiteConnection(path: target.path, mode: .readWrite)
        // A scratch file: a crash leaves it to be removed and composed again, so no journal is needed.
        try db.execute("PRAGMA journal_mode=OFF")
        let tables = try SnapshotMetadata.read(from: db).tables
        var columns: [String: [String]] = [:]
        for table in tables { columns[table.name] = try OutboxSchema.existingColumns(db, table.name) }
        for file in partitions {
            try attached(file, as: "stream", db) {
                try checkSameTables(tables, columns: columns, in: "stream", file: file, db)
                try db.transaction {
                    for table in tables {
                        try copyRows(table, columns: columns[table.name] ?? [], where: nil, db)
                    }
                }
            }
        }
        var held: [String: Int] = [:]
        if let live, FileManager.default.fileExists(atPath: live.path), !leaving.isEmpty {
            try attached(live, as: "live", db) {
                let queue = try db.scalar(
                    "SELECT count(*) FROM live.sqlite_master WHERE type = 'table' AND name = 'ferry_outbox'")
                guard queue?.integer == 1 else { return }
                for (key, file) in leaving.sorted(by: { $0.key < $1.key }) {
                    held[key] = try attached(file, as: "stream", db) {
                        try checkSameTables(tables, columns: columns, in: "stream", file: file, db)
                        return try db.transaction { try heldRows(tables, columns: columns, db) }
                    }
                }
            }
        }
        for key in leaving.keys where held[key] == nil { held[key] = 0 }
        let rows = try db.transaction { () -> Int in
            let rows = try recount(tables, db)
            try PartitionGuard.install(keys: keys, layout: layout, tables: tables, on: db)
            return rows
        }
        return Outcome(held: held, rows: rows)
    }

    /// Runs `body` with `file` attached as `name` (only read).
    private func attached<T>(_ file: URL, as name: String, _ db: SQLiteConnection, _ body: () throws -> T) throws -> T {
        _ = try db.run("ATTACH DATABASE ? AS \(name)", [.text(file.path)])
        defer {
            // Detaching a file only read changes nothing on disk; the connection is closed right after anyway.
            try? db.execute("DETACH DATABASE \(name)")
        }
        return try body()
    }

    /// Refuses a stream file that lacks a table of the shared file or has other columns for it.
    private func checkSameTables(
        _ tables: [SnapshotMetadata.TableInfo], columns: [String: [String]], in schema: String, file: URL,
        _ db: SQLiteConnection
    ) throws {
        for table in tables {
            let theirs = try db.query("SELECT name FROM pragma_table_info(?, ?)", [.text(table.name), .text(schema)])
                .compactMap { $0.first?.text }
            guard theirs == columns[table.name] else {
                throw FerryError(
                    .verification,
                    "the stream file has \(theirs.isEmpty ? "no table" : "other columns for table") '\(table.name)' than the shared stream; fetch again (database.db is unchanged)",
                    path: file.path, key: table.name)
            }
        }
    }

    private func copyRows(
        _ table: SnapshotMetadata.TableInfo, columns: [String], where predicate: String?, _ db: SQLiteConnection,
        _ parameters: [SQLiteValue] = []
    ) throws {
        let t = try OutboxSchema.quoted(table.name, in: [table.name], table: table.name)
        let list = try columns.map { try OutboxSchema.quoted($0, in: columns, table: table.name) }.joined(
            separator: ", ")
        // A row in two streams at once (it moved between partitions, and only one of them is current yet) is kept
        // once: the first stream that has it wins until the other catches up.
        _ = try db.run(
            "INSERT OR IGNORE INTO main.\(t)(\(list)) SELECT \(list) FROM stream.\(t)\(predicate.map { " WHERE \($0)" } ?? "")",
            parameters)
    }

    /// Copies the rows of the attached leaving stream that the live outbox names (by table and primary key, in the
    /// triggers' own `json_object` form); returns how many.
    private func heldRows(
        _ tables: [SnapshotMetadata.TableInfo], columns: [String: [String]], _ db: SQLiteConnection
    ) throws -> Int {
        var held = 0
        for table in tables where !table.primaryKey.isEmpty {
            let existing = columns[table.name] ?? []
            let key = try table.primaryKey.map {
                "\(SQLIdentifier.literal($0)), \(try OutboxSchema.quoted($0, in: existing, table: table.name))"
            }.joined(separator: ", ")
            let before = try db.scalar("SELECT total_changes()")?.integer ?? 0
            try copyRows(
                table, columns: existing,
                where: "json_object(\(key)) IN (SELECT key FROM live.ferry_outbox WHERE tbl = ?)", db,
                [.text(table.name)])
            held += Int((try db.scalar("SELECT total_changes()")?.integer ?? 0) - before)
        }
        return held
    }

    /// Sets the metadata's row counts to the composed file's (`ferry_tables.rows`, `ferry_snapshot.tables`).
    private func recount(_ tables: [SnapshotMetadata.TableInfo], _ db: SQLiteConnection) throws -> Int {
        var counts: [String: Int] = [:]
        for table in tables {
            let t = try OutboxSchema.quoted(table.name, in: [table.name], table: table.name)
            let rows = Int(try db.scalar("SELECT count(*) FROM main.\(t)")?.integer ?? 0)
            counts[table.name] = rows
            _ = try db.run(
                "UPDATE ferry_tables SET rows = ? WHERE name = ?", [.integer(Int64(rows)), .text(table.name)])
        }
        _ = try db.run("UPDATE ferry_snapshot SET tables = ?", [.text(try SnapshotMetadata.json(counts))])
        return counts.values.reduce(0, +)
    }
}
