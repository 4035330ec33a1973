import FerryCore
import Foundation

/// The device's half of "why does this device not show row R?" (`ferry explain --dir D --row TABLE:KEY`), read
/// from the client directory alone, read-only: whether `database.db` has the row (and at which version), the
/// device's queued edits of it (`ferry_outbox`) and its kept rejected edits (`ferry_rejected`).
///
/// ```swift
/// let local = try await LocalRowExplanation.read(directory: url, row: RowReference(parsing: "trips:42"))
/// print(local.text)
/// ```
public struct LocalRowExplanation: Codable, Sendable, Equatable {
    /// A queued or kept edit of the row.
    public struct Edit: Codable, Sendable, Equatable {
        public var id: String
        /// `insert`, `update` or `delete`.
        public var op: String
        public var editedAt: String
        /// For a kept edit: `rejected`, `merged` or `gone`; nil for a queued one.
        public var status: String?
        /// For a queued edit: whether it was already part of an upload (resent until answered).
        public var sent: Bool?
    }

    /// The device's id (`.ferry/client-id`), nil before its first request.
    public var device: String?
    public var table: String
    public var key: [String]
    /// The version `database.db` holds; nil without one.
    public var version: Int?
    /// Whether `database.db` has the row.
    public var inDatabase: Bool
    /// Queued edits of the row, oldest first.
    public var outbox: [Edit]
    /// Kept rejected (or merged, or gone) edits of the row.
    public var rejected: [Edit]

    /// Reads the row's local state; a directory without `database.db` answers `inDatabase: false`, `version: nil`.
    /// Throws `.badInput` for a table `database.db` does not have, or a key of the wrong number of columns.
    public static func read(directory: URL, row: RowReference) async throws -> LocalRowExplanation {
        try await BlockingWork.run { try readBlocking(directory: ClientDirectory(directory), row: row) }
    }

    static func readBlocking(directory: ClientDirectory, row: RowReference) throws -> LocalRowExplanation {
        let device = FerryClient.readDeviceID(directory)
        var answer = LocalRowExplanation(
            device: device, table: row.table, key: row.key, version: nil, inDatabase: false, outbox: [], rejected: [])
        guard FileManager.default.fileExists(atPath: directory.database.path) else { return answer }
        let db = try SQLiteConnection(path: directory.database.path, mode: .readOnly)
        // A file without ferry_snapshot holds no version: the answer says none.
        answer.version = try? SnapshotMetadata.read(from: db).version
        let columns = try db.query(
            "SELECT name, pk FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk", [.text(row.table)]
        )
        .compactMap { $0.first?.text }
        guard !columns.isEmpty else {
            throw FerryError(.badInput, "database.db has no table '\(row.table)' with a primary key", key: "row")
        }
        guard columns.count == row.key.count else {
            throw FerryError(
                .badInput,
                "table '\(row.table)' has a \(columns.count)-column key (\(columns.joined(separator: ", "))); name the row as \(row.table):\(columns.map { $0.uppercased() }.joined(separator: ","))",
                key: "row")
        }
        let match = columns.map { "\(SQLIdentifier.quoteSQLite($0)) = ?" }.joined(separator: " AND ")
        let values = row.key.map { SQLiteValue.text($0) }
        answer.inDatabase =
            try !db.query("SELECT 1 FROM \(SQLIdentifier.quoteSQLite(row.table)) WHERE \(match) LIMIT 1", values)
            .isEmpty
        // Queued and kept edits name their row as a JSON object of the key columns.
        let keyMatch = columns.map { _ in "CAST(json_extract(key, '$.' || ?) AS TEXT) = ?" }.joined(
            separator: " AND ")
        let keyValues = zip(columns, row.key).flatMap { [SQLiteValue.text($0), .text($1)] }
        if try tableExists("ferry_outbox", db) {
            answer.outbox = try db.query(
                "SELECT id, op, editedAt, sent FROM ferry_outbox WHERE tbl = ? AND \(keyMatch) ORDER BY seq",
                [.text(row.table)] + keyValues
            ).map {
                Edit(
                    id: $0[0].text ?? "", op: $0[1].text ?? "", editedAt: $0[2].text ?? "", status: nil,
                    sent: $0[3].integer == 1)
            }
        }
        if try tableExists("ferry_rejected", db) {
            answer.rejected = try db.query(
                "SELECT id, op, editedAt, status FROM ferry_rejected WHERE tbl = ? AND \(keyMatch) ORDER BY editedAt, id",
                [.text(row.table)] + keyValues
            ).map {
                Edit(
                    id: $0[0].text ?? "", op: $0[1].text ?? "", editedAt: $0[2].text ?? "", status: $0[3].text,
                    sent: nil)
            }
        }
        return answer
    }

    static func tableExists(_ name: String, _ db: SQLiteConnection) throws -> Bool {
        try !db.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [.text(name)]).isEmpty
    }

    /// The answer for a person.
    public var text: String {
        var lines: [String] = []
        let name = "\(table):\(key.joined(separator: ","))"
        let held = version.map { "database.db (version \($0))" } ?? "database.db (none yet)"
        lines.append("device \(device ?? "(no id yet)"): row \(name) is \(inDatabase ? "in" : "not in") \(held)")
        lines.append("queued edits of it: \(outbox.count)")
        for edit in outbox {
            lines.append("  \(edit.editedAt)  \(edit.op)\(edit.sent == true ? "  (sent, awaiting an answer)" : "")")
        }
        lines.append("rejected edits kept: \(rejected.count)")
        for edit in rejected {
            lines.append("  \(edit.editedAt)  \(edit.op)  \(edit.status ?? "")  (`ferry rejected list` shows them)")
        }
        return lines.joined(separator: "\n")
    }
}

extension FerryClient {
    /// The device id the client directory at `directory` sends as `Ferry-Device` (`.ferry/client-id`), without
    /// making one: nil before the directory's first request.
    public static func storedDeviceID(directory: URL) async throws -> String? {
        try await BlockingWork.run { readDeviceID(ClientDirectory(directory)) }
    }

    static func readDeviceID(_ directory: ClientDirectory) -> String? {
        FileManager.default.contents(atPath: directory.deviceIDFile.path).map {
            String(decoding: $0, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }
}
