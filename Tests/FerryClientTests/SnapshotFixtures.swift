import FerryClient
import FerryCore
import FerryStore
import Foundation
import Logging

/// Builds real, published snapshots in a real store, the way the publisher does: a SQLite file in the store's temp
/// area with the data tables plus `ferry_snapshot`/`ferry_tables`, committed with `FileSnapshotStore.commit`.
struct SnapshotFixtures {
    let store: FileSnapshotStore
    let dataset: String

    init(root: URL, dataset: String = "trips") {
        store = FileSnapshotStore(root: root)
        self.dataset = dataset
    }

    /// Publishes the next version with `rows` small rows, `blobMiB` MiB of random blobs (for big downloads) and
    /// `textMiB` MiB of hex text (compresses to about half, as real data does: for gzip downloads).
    @discardableResult
    func publish(rows: Int = 3, blobMiB: Int = 0, textMiB: Int = 0, schemaVersion: Int = 1, label: String = "") throws
        -> Manifest
    {
        let lock = try store.lock(dataset: dataset, wait: true)
        defer { lock.unlock() }
        try DurableFile.makeDirectory(store.temporaryDirectory(dataset: dataset))
        let version = try store.nextVersion(dataset: dataset)
        let file = store.temporaryDirectory(dataset: dataset).appendingPathComponent("\(UUID().uuidString).sqlite")
        let createdAt = Timestamp.format(Date())
        do {
            let db = try SQLiteConnection(path: file.path)
            try db.transaction {
                try db.execute("CREATE TABLE trips(id TEXT PRIMARY KEY, name TEXT NOT NULL, seats INTEGER)")
                try db.execute("CREATE TABLE blobs(id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
                for i in 0..<rows {
                    try db.run(
                        "INSERT INTO trips(id, name, seats) VALUES (?, ?, ?)",
                        [.text("t\(i)"), .text("Växjö-Kalmar \(label) v\(version)"), .integer(Int64(i))])
                }
                if blobMiB > 0 {
                    try db.run(
                        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) INSERT INTO blobs(id, data) SELECT x, randomblob(65536) FROM c",
                        [.integer(Int64(blobMiB * 16))])
                }
                if textMiB > 0 {
                    try db.run(
                        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) INSERT INTO blobs(id, data) SELECT 100000 + x, hex(randomblob(32768)) FROM c",
                        [.integer(Int64(textMiB * 16))])
                }
                let tables = [
                    SnapshotMetadata.TableInfo(
                        name: "trips", primaryKey: ["id"], columns: ["id", "name", "seats"], writable: false,
                        merge: .newestWins,
                        createdColumn: nil, updatedColumn: nil, rows: rows),
                    SnapshotMetadata.TableInfo(
                        name: "blobs", primaryKey: ["id"], columns: ["id", "data"], writable: false, merge: .newestWins,
                        createdColumn: nil, updatedColumn: nil, rows: (blobMiB + textMiB) * 16),
                ]
                try SnapshotMetadata(
                    dataset: dataset, version: version, schemaVersion: schemaVersion, createdAt: createdAt,
                    tables: tables
                )
                .write(to: db)
            }
        }
        return try store.commit(
            dataset: dataset, version: version, snapshot: file, schemaVersion: schemaVersion,
            tables: ["trips": rows, "blobs": (blobMiB + textMiB) * 16],
            dataDigest: String(repeating: "0", count: 64), createdAt: createdAt, keep: 10)
    }

    func snapshotFile(_ version: Int) throws -> URL { try store.snapshotURL(dataset: dataset, version: version) }
}

/// Checks that `file` is exactly one complete published version: it opens, passes `integrity_check`, and hashes to the
/// checksum of one of `published`. Returns that version.
func publishedVersion(of file: URL, among published: [Manifest]) throws -> Int? {
    // Read-write, as an app opens it: SQLite rolls back a journal left by a killed writer.
    let db = try SQLiteConnection(path: file.path, mode: .readWrite)
    try db.checkIntegrity()
    // A database the client has opened carries its outbox triggers and names its published checksum in
    // ferry_origin; its ferry_snapshot row must then agree with that manifest's version.
    if let origin = OutboxSchema.origin(of: db) {
        guard let manifest = published.first(where: { $0.sha256 == origin }) else { return nil }
        return try SnapshotMetadata.read(from: db).version == manifest.version ? manifest.version : nil
    }
    let sha = try FileDigest.sha256Hex(of: file)
    return published.first { $0.sha256 == sha }?.version
}

extension Logger {
    static let test: Logger = {
        var logger = Logger(label: "ferry.client.test") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = .warning
        return logger
    }()
}
