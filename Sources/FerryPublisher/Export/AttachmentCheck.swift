import FerryCore

/// The publish's check of a table's attachment columns: every value is an attachment's SHA-256 (64 lowercase hex
/// characters) or NULL. A row that breaks it fails the publish with the table, the column and the row's key named,
/// before anything is stored.
struct AttachmentCheck: Sendable {
    let table: String
    let columns: [String]
    let primaryKey: [String]

    /// Runs the check on a finished file: one scan of the table per column.
    func run(on db: SQLiteConnection, templatePath: String) throws {
        let keys = primaryKey.map(SQLIdentifier.quote).joined(separator: ", ")
        for column in columns {
            let quoted = SQLIdentifier.quote(column)
            let sql = """
                SELECT \(keys), \(quoted) FROM \(SQLIdentifier.quote(table)) WHERE \(quoted) IS NOT NULL
                AND (typeof(\(quoted)) <> 'text' OR length(\(quoted)) <> 64 OR \(quoted) GLOB '*[^0-9a-f]*') LIMIT 1
                """
            guard let row = try db.query(sql).first else { continue }
            let key = zip(primaryKey, row).map { "\($0)=\(Self.describe($1))" }.joined(separator: ", ")
            throw FerryError(
                .badInput,
                "table '\(table)', column '\(column)', row \(key): \(Self.describe(row[row.count - 1])) is not an attachment's SHA-256 (64 lowercase hex characters) or NULL; nothing was published: fix the row in PostgreSQL, or remove '\(column)' from the table's `attachments:`",
                path: templatePath, key: "\(table).\(column)")
        }
    }

    private static func describe(_ value: SQLiteValue) -> String {
        switch value {
        case .integer(let n): return String(n)
        case .real(let x): return String(x)
        case .text(let t): return "'" + (t.count > 80 ? String(t.prefix(80)) + "…" : t) + "'"
        case .blob(let b): return "a \(b.count)-byte blob"
        case .null: return "NULL"
        }
    }
}
