import FerryCore
import Foundation

/// Writing rows with capture off: how the outbox replays queued edits and writes the server's answers.
extension Outbox {
    static func setCapture(_ on: Bool, _ db: SQLiteConnection) throws {
        try db.run("UPDATE ferry_capture SET enabled = ?", [.integer(on ? 1 : 0)])
    }

    /// Replays the queued edits of one row (made under this database's line) on top of what is there now.
    static func replayPending(table: SnapshotMetadata.TableInfo, keyText: String, db: SQLiteConnection) throws {
        for row in try db.query(
            "SELECT op, key, vals, editedAt FROM ferry_outbox WHERE tbl = ? AND key = ? AND line IS NULL ORDER BY seq",
            [.text(table.name), .text(keyText)])
        {
            guard let op = row[0].text.flatMap(Change.Operation.init(rawValue:)), let key = row[1].text,
                let vals = row[2].text, let editedAt = row[3].text
            else { continue }
            try replay(
                op: op, key: try decodeObject(key, db), values: try decodeObject(vals, db), editedAt: editedAt,
                table: table, db: db)
        }
    }

    static func replay(
        op: Change.Operation, key: [String: JSONValue], values: [String: JSONValue], editedAt: String,
        table: SnapshotMetadata.TableInfo, db: SQLiteConnection
    ) throws {
        var stamped = values
        if let u = table.updatedColumn { stamped[u] = .string(editedAt) }
        switch op {
        case .insert:
            if let c = table.createdColumn { stamped[c] = .string(editedAt) }
            try writeRow(stamped.merging(key) { _, k in k }, table: table, db: db)
        case .update:
            try updateRow(key: key, values: stamped, table: table, db: db)
        case .delete:
            try deleteRow(key: key, table: table, db: db)
        }
    }

    static func columns(_ table: SnapshotMetadata.TableInfo, _ db: SQLiteConnection) throws -> [String] {
        try OutboxSchema.existingColumns(db, table.name)
    }

    static func writeRow(_ row: [String: JSONValue], table: SnapshotMetadata.TableInfo, db: SQLiteConnection) throws {
        let existing = try columns(table, db)
        let names = row.keys.filter { existing.contains($0) }.sorted()
        guard !names.isEmpty else { return }
        let quoted = try names.map { try OutboxSchema.quoted($0, in: existing, table: table.name) }
        let sql =
            "INSERT OR REPLACE INTO \(try OutboxSchema.quoted(table.name, in: [table.name], table: table.name))(\(quoted.joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: names.count).joined(separator: ", ")))"
        try db.run(sql, names.map { sqliteValue(row[$0]!) })
    }

    static func updateRow(
        key: [String: JSONValue], values: [String: JSONValue], table: SnapshotMetadata.TableInfo, db: SQLiteConnection
    ) throws {
        let existing = try columns(table, db)
        let names = values.keys.filter { existing.contains($0) && !table.primaryKey.contains($0) }.sorted()
        guard !names.isEmpty else { return }
        let sets = try names.map { "\(try OutboxSchema.quoted($0, in: existing, table: table.name)) = ?" }
        let (whereSQL, whereValues) = try keyPredicate(key, table: table, existing: existing)
        try db.run(
            "UPDATE \(try OutboxSchema.quoted(table.name, in: [table.name], table: table.name)) SET \(sets.joined(separator: ", ")) WHERE \(whereSQL)",
            names.map { sqliteValue(values[$0]!) } + whereValues)
    }

    static func deleteRow(key: [String: JSONValue], table: SnapshotMetadata.TableInfo, db: SQLiteConnection) throws {
        let existing = try columns(table, db)
        let (whereSQL, whereValues) = try keyPredicate(key, table: table, existing: existing)
        try db.run(
            "DELETE FROM \(try OutboxSchema.quoted(table.name, in: [table.name], table: table.name)) WHERE \(whereSQL)",
            whereValues)
    }

    static func keyPredicate(_ key: [String: JSONValue], table: SnapshotMetadata.TableInfo, existing: [String]) throws
        -> (String, [SQLiteValue])
    {
        var parts: [String] = []
        var values: [SQLiteValue] = []
        for column in table.primaryKey {
            guard let value = key[column] else {
                throw FerryError(.verification, "key of \(table.name) lacks column \(column)", key: table.name)
            }
            parts.append("\(try OutboxSchema.quoted(column, in: existing, table: table.name)) IS ?")
            values.append(sqliteValue(value))
        }
        return (parts.joined(separator: " AND "), values)
    }

    static func sqliteValue(_ value: JSONValue) -> SQLiteValue {
        switch value {
        case .null: return .null
        case .bool(let b): return .integer(b ? 1 : 0)
        case .int(let i): return .integer(i)
        case .double(let d): return .real(d)
        case .string(let s): return .text(s)
        }
    }

    static func decodeObject(_ text: String, _ db: SQLiteConnection) throws -> [String: JSONValue] {
        do {
            return try JSONDecoder().decode([String: JSONValue].self, from: Data(text.utf8))
        } catch {
            throw FerryError(.verification, "ferry_outbox holds malformed JSON: \(text.prefix(80))", path: db.path)
        }
    }

    /// The key as the triggers store it: SQLite's own json_object over the primary-key columns in key order.
    static func keyText(_ key: [String: JSONValue], table: SnapshotMetadata.TableInfo, db: SQLiteConnection) throws
        -> String
    {
        var values: [SQLiteValue] = []
        for column in table.primaryKey {
            values.append(.text(column))
            values.append(key[column].map(sqliteValue) ?? .null)
        }
        let placeholders = Array(repeating: "?, ?", count: table.primaryKey.count).joined(separator: ", ")
        return try db.scalar("SELECT json_object(\(placeholders))", values)?.text ?? "{}"
    }
}
