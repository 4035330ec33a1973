import Foundation

/// The metadata tables inside every snapshot file: written by the publisher, read by the client.
///
/// ```sql
/// CREATE TABLE ferry_snapshot(            -- exactly one row
///   dataset TEXT NOT NULL, version INTEGER NOT NULL, schemaVersion INTEGER NOT NULL,
///   createdAt TEXT NOT NULL,              -- ISO-8601 UTC ms
///   tables TEXT NOT NULL);                -- JSON {"table": rows}
/// CREATE TABLE ferry_tables(              -- one row per exported table
///   name TEXT PRIMARY KEY, primaryKey TEXT NOT NULL,   -- JSON array of column names
///   columns TEXT NOT NULL,                -- JSON array of column names, in table order
///   writable INTEGER NOT NULL, merge TEXT NOT NULL,    -- 0/1; newest-wins | server-wins | client-wins
///   createdColumn TEXT, updatedColumn TEXT,            -- timestamp columns present in the table, or NULL
///   rows INTEGER NOT NULL);
/// CREATE TABLE ferry_attachments(         -- only when a table names attachments (`attachments:`)
///   tableName TEXT NOT NULL, columnName TEXT NOT NULL,
///   download TEXT NOT NULL,               -- eager | on-demand
///   PRIMARY KEY(tableName, columnName));
/// ```
public struct SnapshotMetadata: Sendable, Equatable {
    public var dataset: String
    public var version: Int
    public var schemaVersion: Int
    public var createdAt: String
    public var tables: [TableInfo]
    /// The columns that name attachments, sorted by table and column; empty for most datasets (and then the
    /// file has no `ferry_attachments` table).
    public var attachments: [AttachmentColumn] = []

    /// What the client needs to know about one exported table.
    public struct TableInfo: Sendable, Equatable, Codable {
        public var name: String
        public var primaryKey: [String]
        public var columns: [String]
        public var writable: Bool
        public var merge: MergeRule
        public var createdColumn: String?
        public var updatedColumn: String?
        public var rows: Int

        public init(
            name: String, primaryKey: [String], columns: [String], writable: Bool, merge: MergeRule,
            createdColumn: String?, updatedColumn: String?, rows: Int
        ) {
            self.name = name
            self.primaryKey = primaryKey
            self.columns = columns
            self.writable = writable
            self.merge = merge
            self.createdColumn = createdColumn
            self.updatedColumn = updatedColumn
            self.rows = rows
        }
    }

    public init(
        dataset: String, version: Int, schemaVersion: Int, createdAt: String, tables: [TableInfo],
        attachments: [AttachmentColumn] = []
    ) {
        self.attachments = attachments.sorted { ($0.table, $0.column) < ($1.table, $1.column) }
        self.dataset = dataset
        self.version = version
        self.schemaVersion = schemaVersion
        self.createdAt = createdAt
        self.tables = tables
    }

    public static let ddl = """
        CREATE TABLE ferry_snapshot(dataset TEXT NOT NULL, version INTEGER NOT NULL, schemaVersion INTEGER NOT NULL,
          createdAt TEXT NOT NULL, tables TEXT NOT NULL);
        CREATE TABLE ferry_tables(name TEXT PRIMARY KEY, primaryKey TEXT NOT NULL, columns TEXT NOT NULL,
          writable INTEGER NOT NULL, merge TEXT NOT NULL, createdColumn TEXT, updatedColumn TEXT, rows INTEGER NOT NULL);
        """

    /// The table of attachment columns, created only when there is one.
    public static let attachmentsDDL = """
        CREATE TABLE ferry_attachments(tableName TEXT NOT NULL, columnName TEXT NOT NULL, download TEXT NOT NULL,
          PRIMARY KEY(tableName, columnName));
        """

    /// Creates the metadata tables and writes this metadata (call inside the load transaction).
    public func write(to db: SQLiteConnection) throws {
        try db.execute(Self.ddl)
        try insertRows(into: db)
        guard !attachments.isEmpty else { return }
        try db.execute(Self.attachmentsDDL)
        for a in attachments {
            try db.run(
                "INSERT INTO ferry_attachments(tableName, columnName, download) VALUES (?, ?, ?)",
                [.text(a.table), .text(a.column), .text(a.download.rawValue)])
        }
    }

    /// Writes this metadata into metadata tables that exist and are empty (`ferry_attachments` is left as it is:
    /// a file built from another keeps its attachment columns, which must be the same).
    public func insertRows(into db: SQLiteConnection) throws {
        let counts = Dictionary(uniqueKeysWithValues: tables.map { ($0.name, $0.rows) })
        try db.run(
            "INSERT INTO ferry_snapshot(dataset, version, schemaVersion, createdAt, tables) VALUES (?, ?, ?, ?, ?)",
            [
                .text(dataset), .integer(Int64(version)), .integer(Int64(schemaVersion)), .text(createdAt),
                .text(try Self.json(counts)),
            ])
        for t in tables {
            try db.run(
                "INSERT INTO ferry_tables(name, primaryKey, columns, writable, merge, createdColumn, updatedColumn, rows) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    .text(t.name), .text(try Self.json(t.primaryKey)), .text(try Self.json(t.columns)),
                    .integer(t.writable ? 1 : 0),
                    .text(t.merge.rawValue), t.createdColumn.map { .text($0) } ?? .null,
                    t.updatedColumn.map { .text($0) } ?? .null,
                    .integer(Int64(t.rows)),
                ])
        }
    }

    /// Reads the metadata from a snapshot; throws a verification error when it is missing or malformed.
    public static func read(from db: SQLiteConnection) throws -> SnapshotMetadata {
        let rows: [[SQLiteValue]]
        do {
            rows = try db.query("SELECT dataset, version, schemaVersion, createdAt FROM ferry_snapshot")
        } catch {
            throw FerryError(.verification, "not a Ferry snapshot: no ferry_snapshot table", path: db.path)
        }
        guard rows.count == 1, let dataset = rows[0][0].text, let version = rows[0][1].integer,
            let schemaVersion = rows[0][2].integer, let createdAt = rows[0][3].text
        else { throw FerryError(.verification, "ferry_snapshot must hold exactly one well-formed row", path: db.path) }
        var tables: [TableInfo] = []
        for r in try db.query(
            "SELECT name, primaryKey, columns, writable, merge, createdColumn, updatedColumn, rows FROM ferry_tables ORDER BY name"
        ) {
            guard let name = r[0].text, let pk = r[1].text, let cols = r[2].text, let writable = r[3].integer,
                let mergeText = r[4].text, let count = r[7].integer,
                // A malformed key or column list is reported just below, with the file's path.
                let pkList = try? JSONDecoder().decode([String].self, from: Data(pk.utf8)),
                let colList = try? JSONDecoder().decode([String].self, from: Data(cols.utf8))  // as above
            else { throw FerryError(.verification, "ferry_tables has a malformed row", path: db.path) }
            guard let merge = MergeRule(rawValue: mergeText) else {
                throw FerryError(
                    .verification, "ferry_tables gives table '\(name)' an unknown merge rule '\(mergeText)'",
                    path: db.path, key: "\(name).merge")
            }
            tables.append(
                TableInfo(
                    name: name, primaryKey: pkList, columns: colList, writable: writable != 0, merge: merge,
                    createdColumn: r[5].text, updatedColumn: r[6].text, rows: Int(count)))
        }
        return SnapshotMetadata(
            dataset: dataset, version: Int(version), schemaVersion: Int(schemaVersion), createdAt: createdAt,
            tables: tables, attachments: try readAttachments(from: db))
    }

    /// The attachment columns of a snapshot: none when it has no `ferry_attachments` table.
    public static func readAttachments(from db: SQLiteConnection) throws -> [AttachmentColumn] {
        let exists = try db.query(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ferry_attachments'")
        guard !exists.isEmpty else { return [] }
        return try db.query("SELECT tableName, columnName, download FROM ferry_attachments ORDER BY 1, 2").map { r in
            guard let table = r[0].text, let column = r[1].text, let text = r[2].text,
                let download = Attachment.Download(rawValue: text)
            else {
                throw FerryError(
                    .verification, "ferry_attachments has a malformed row: download must be eager or on-demand",
                    path: db.path)
            }
            return AttachmentColumn(table: table, column: column, download: download)
        }
    }

    /// The attachments a snapshot's rows name: every SHA-256 an attachment column holds, with its download mode (eager
    /// when any eager column names it). The one query for it: the client's sync and the server's retention use it.
    ///
    /// ```swift
    /// let named = try SnapshotMetadata.attachmentNames(in: db)   // ["9f86…": .eager]
    /// ```
    public static func attachmentNames(in db: SQLiteConnection, columns: [AttachmentColumn]? = nil) throws
        -> [String: Attachment.Download]
    {
        var named: [String: Attachment.Download] = [:]
        for column in try columns ?? readAttachments(from: db) {
            let name = SQLIdentifier.quoteSQLite(column.column)
            let sql =
                "SELECT DISTINCT \(name) FROM \(SQLIdentifier.quoteSQLite(column.table)) WHERE \(name) IS NOT NULL"
            for row in try db.query(sql) {
                guard let sha256 = row.first?.text, Attachment.isID(sha256) else { continue }
                if named[sha256] != .eager { named[sha256] = column.download }
            }
        }
        return named
    }

    /// JSON with sorted keys: how the metadata tables store lists and row counts.
    public static func json<T: Encodable>(_ value: T) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}
