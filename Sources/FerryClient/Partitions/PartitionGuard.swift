import FerryCore
import Foundation

/// Refuses a device write that would put a row outside the partitions the device carries, before anything is queued:
/// triggers inside the composed database. A row of a table placed by column must name a subscribed key in that column
/// (`ferry_partitions` lists them); a row of a table placed by its parent must have its parent on the device. The
/// triggers run only while the outbox captures edits, so replaying queued edits and writing the server's answers are
/// never refused.
///
/// ```swift
/// try PartitionGuard.install(keys: ["1", "7"], layout: layout, tables: metadata.tables, on: composed)
/// ```
enum PartitionGuard {
    /// The table listing the subscribed keys inside a partitioned device's database.
    static let keysTable = "ferry_partitions"

    /// Creates `ferry_partitions` holding `keys` and the guarding triggers, in the caller's transaction.
    static func install(
        keys: [String], layout: PartitionLayout, tables: [SnapshotMetadata.TableInfo], on db: SQLiteConnection
    ) throws {
        try db.execute(
            "DROP TABLE IF EXISTS \(keysTable); CREATE TABLE \(keysTable)(key TEXT PRIMARY KEY NOT NULL) WITHOUT ROWID")
        for key in keys { _ = try db.run("INSERT INTO \(keysTable)(key) VALUES (?)", [.text(key)]) }
        let byName = Dictionary(tables.map { ($0.name, $0) }) { first, _ in first }
        for table in layout.tables {
            guard let info = byName[table.name] else { continue }
            for sql in try triggers(for: table, info: info, tables: byName, dataset: layout) {
                try db.execute(sql)
            }
        }
    }

    /// The triggers of one table (none for a shared table).
    static func triggers(
        for table: PartitionLayout.Table, info: SnapshotMetadata.TableInfo,
        tables: [String: SnapshotMetadata.TableInfo], dataset layout: PartitionLayout
    ) throws -> [String] {
        let t = try OutboxSchema.quoted(table.name, in: [table.name], table: table.name)
        let name = table.name.replacingOccurrences(of: "\"", with: "")
        let column: String
        let refused: String
        let fix: String
        if let c = table.partition {
            let quoted = try OutboxSchema.quoted(c, in: info.columns, table: table.name)
            column = c
            refused = "NOT EXISTS (SELECT 1 FROM \(keysTable) WHERE key = CAST(NEW.\(quoted) AS TEXT))"
            fix =
                "\(table.name).\(c) must name a partition of '\(layout.partition.table)' this device subscribes to: subscribe to it first (ferry subscribe, or subscribe(_:)) and fetch"
        } else if let parent = table.parent {
            guard let parentInfo = tables[parent.table], parentInfo.primaryKey.count == 1 else {
                throw FerryError(
                    .verification,
                    "table '\(table.name)' follows '\(parent.table)', which is not a table with a one-column primary key in the snapshot",
                    key: table.name)
            }
            let quoted = try OutboxSchema.quoted(parent.column, in: info.columns, table: table.name)
            let p = try OutboxSchema.quoted(parent.table, in: [parent.table], table: parent.table)
            let key = try OutboxSchema.quoted(parentInfo.primaryKey[0], in: parentInfo.columns, table: parent.table)
            column = parent.column
            refused = "NOT EXISTS (SELECT 1 FROM \(p) WHERE \(key) = NEW.\(quoted))"
            fix =
                "\(table.name).\(parent.column) must name a row of '\(parent.table)' on this device (a row of a subscribed partition): subscribe to its partition first (ferry subscribe, or subscribe(_:)) and fetch"
        } else {
            return []  // shared: every device carries the table whole
        }
        let when = "\(OutboxSchema.capturing) AND \(refused)"
        let raise = "SELECT RAISE(ABORT, \(SQLIdentifier.literal(fix)));"
        let quotedColumn = try OutboxSchema.quoted(column, in: info.columns, table: table.name)
        return [
            "DROP TRIGGER IF EXISTS \(SQLIdentifier.quoteSQLite("ferry_partition_\(name)_insert"))",
            "CREATE TRIGGER \(SQLIdentifier.quoteSQLite("ferry_partition_\(name)_insert")) BEFORE INSERT ON \(t) WHEN \(when) BEGIN \(raise) END",
            "DROP TRIGGER IF EXISTS \(SQLIdentifier.quoteSQLite("ferry_partition_\(name)_update"))",
            "CREATE TRIGGER \(SQLIdentifier.quoteSQLite("ferry_partition_\(name)_update")) BEFORE UPDATE OF \(quotedColumn) ON \(t) WHEN \(when) BEGIN \(raise) END",
        ]
    }
}
