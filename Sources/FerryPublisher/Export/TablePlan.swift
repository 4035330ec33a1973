import FerryCore
import FerryPostgres

/// One table's export, resolved against PostgreSQL: its columns, key, and the SQL on both sides.
struct TablePlan {
    let index: Int
    let table: Template.Table
    /// Exported columns, named as in SQLite.
    let columns: [ColumnPlan]
    /// Key columns, SQLite names.
    let primaryKey: [String]
    /// Template timestamp columns that this table has (nil when absent).
    let createdColumn: String?
    let updatedColumn: String?
    /// The rows to export: the template's query, or every column of the source, narrowed by the filter and the
    /// parent chain (``Template/rowsSQL(tableAt:scopeExpression:)``).
    let rowsQuery: String

    var name: String { table.name }

    /// `COPY (SELECT … ORDER BY pk) TO STDOUT (FORMAT binary)`: rows in key order, so equal data gives equal bytes.
    var copySQL: String {
        "COPY (SELECT \(selectList) FROM (\(rowsQuery)) AS q ORDER BY \(keyOrder)) TO STDOUT (FORMAT binary)"
    }

    /// The exported columns, as `COPY` selects them from the rows aliased `q`.
    var selectList: String { columns.map(\.selectExpression).joined(separator: ", ") }

    /// `ORDER BY` of the rows aliased `q`: the key columns, text ones in byte order.
    var keyOrder: String {
        primaryKey.map { key -> String in
            let column = columns.first { $0.name == key }
            let quoted = "q." + SQLIdentifier.quote(column?.sourceName ?? key)
            return column?.sortsAsText == true ? quoted + " COLLATE \"C\"" : quoted
        }.joined(separator: ", ")
    }

    /// Derived SQLite DDL: column affinities from the type mapping, the primary key from the template or source.
    /// A single INTEGER key becomes the rowid, as SQLite does for `INTEGER PRIMARY KEY`.
    var createSQL: String {
        var parts = columns.map {
            "\(SQLIdentifier.quote($0.name)) \($0.sqliteType)" + (primaryKey.contains($0.name) ? " NOT NULL" : "")
        }
        parts.append("PRIMARY KEY (\(primaryKey.map(SQLIdentifier.quote).joined(separator: ", ")))")
        return "CREATE TABLE \(SQLIdentifier.quote(name)) (\n  \(parts.joined(separator: ",\n  "))\n)"
    }

    var insertSQL: String {
        let names = columns.map { SQLIdentifier.quote($0.name) }.joined(separator: ", ")
        let marks = Array(repeating: "?", count: columns.count).joined(separator: ", ")
        return "INSERT INTO \(SQLIdentifier.quote(name)) (\(names)) VALUES (\(marks))"
    }

    /// What the digest covers besides the rows: anything that changes the SQLite file's tables.
    var definition: String {
        let cols = columns.map {
            ($0.sourceName == $0.name ? "" : "\($0.sourceName)>") + "\($0.name):\($0.typeName):\($0.sqliteType)"
        }.joined(separator: ",")
        return
            "table=\(name)|source=\(table.source)|query=\(table.query ?? "")|columns=\(cols)|pk=\(primaryKey.joined(separator: ","))"
            + "|writable=\(table.writable)|merge=\(table.merge.rawValue)|created=\(createdColumn ?? "")|updated=\(updatedColumn ?? "")"
            + "|indexes=\(table.indexes.joined(separator: ";"))"
            + (table.filter == nil && table.parent == nil
                ? "" : "|filter=\(table.filter ?? "")|parent=\(table.parent.map { "\($0.table).\($0.column)" } ?? "")")
            + "\n"
    }
}
