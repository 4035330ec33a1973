import FerryCore
import Foundation

/// Generates and installs the outbox machinery inside a client database: the `ferry_outbox` queue, the capture
/// switch, and per-table triggers that record every write to a writable table in the same transaction as the
/// write itself (so a kill -9 can never keep one without the other), stamp `created_at`/`updated_at` locally
/// (as the edits are made on the device), and refuse writes to read-only tables.
///
/// Identifiers come only from `ferry_tables` and are checked against the table's real columns
/// (`PRAGMA table_info`) before they are quoted into trigger SQL.
///
/// ```swift
/// try OutboxSchema.install(on: db, tables: SnapshotMetadata.read(from: db).tables)
/// ```
public enum OutboxSchema {
    /// The queue, the capture switch and the server-base memory.
    ///
    /// - `ferry_outbox`: one row per pending change, in `seq` order. `sent` = 1 once the change was part of an
    ///   upload: it is never coalesced after that, and is resent with the same id until the server answers. `line`
    ///   is the schema line (`trips.v1`) the edit was made under when that is not the line of the database the row
    ///   sits in (NULL: that database's own `ferry_snapshot.dataset`): a swap to another line stamps the queued
    ///   rows with the old line, and such rows are uploaded to their line, never replayed or coalesced into. `base`
    ///   (updates) is a JSON object of each changed column's value before the edit, for per-column merging.
    /// - `ferry_capture`: one row; triggers record only while `enabled` = 1 (the library turns it off while it
    ///   writes server rows or replays edits).
    /// - `ferry_base`: the server's `updated_at` of a row as it was before its first local edit, so every later
    ///   change to that row carries the base the server knows.
    /// - `ferry_rejected`: edits the server answered `rejected`, `gone` or `merged`, with the values that lost, the
    ///   server's row (`serverVals`) and the lost columns (`lost`), until the app acknowledges, resubmits or
    ///   discards them (``RejectedEdit``).
    /// - `ferry_written`: every row the device wrote itself since the version it holds, queued or already answered;
    ///   `answered` = 1 while the row holds the server's answer (applied or rejected) to its last edit;
    ///   `present` says whether that version had the row, whose values wait in the table's `ferry_was_…` copy
    ///   (`shadowTable(_:)`). A patch puts these rows back as published before it applies (docs/delta.md).
    static let queueDDL = """
        CREATE TABLE IF NOT EXISTS ferry_outbox(
          seq INTEGER PRIMARY KEY AUTOINCREMENT,
          id TEXT NOT NULL UNIQUE,
          tbl TEXT NOT NULL,
          op TEXT NOT NULL CHECK (op IN ('insert', 'update', 'delete')),
          key TEXT NOT NULL,
          vals TEXT NOT NULL DEFAULT '{}',
          editedAt TEXT NOT NULL,
          baseUpdatedAt TEXT,
          sent INTEGER NOT NULL DEFAULT 0,
          line TEXT,
          base TEXT);
        CREATE INDEX IF NOT EXISTS ferry_outbox_row ON ferry_outbox(tbl, key);
        CREATE TABLE IF NOT EXISTS ferry_capture(enabled INTEGER NOT NULL);
        INSERT INTO ferry_capture(enabled) SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM ferry_capture);
        CREATE TABLE IF NOT EXISTS ferry_base(tbl TEXT NOT NULL, key TEXT NOT NULL, updatedAt TEXT, PRIMARY KEY (tbl, key));
        CREATE TABLE IF NOT EXISTS ferry_written(tbl TEXT NOT NULL, key TEXT NOT NULL, present INTEGER NOT NULL, answered INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (tbl, key));
        CREATE TABLE IF NOT EXISTS ferry_rejected(
          id TEXT PRIMARY KEY,
          tbl TEXT NOT NULL,
          op TEXT NOT NULL,
          key TEXT NOT NULL,
          vals TEXT NOT NULL,
          status TEXT NOT NULL,
          rule TEXT NOT NULL,
          reason TEXT,
          editedAt TEXT NOT NULL,
          answeredAt TEXT NOT NULL,
          serverVals TEXT,
          lost TEXT);
        """

    /// Columns added to the queue's tables after they first shipped: a database made before gains them on install.
    static let laterColumns = [
        ("ferry_outbox", "line", "TEXT"), ("ferry_outbox", "base", "TEXT"), ("ferry_rejected", "serverVals", "TEXT"),
        ("ferry_rejected", "lost", "TEXT"),
    ]

    /// Local clock as ISO-8601 UTC milliseconds, the form snapshots use.
    static let nowSQL = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
    /// A random UUID (version 4 layout) made in SQL.
    static let uuidSQL = """
        (lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' || substr(lower(hex(randomblob(2))), 2) || '-' \
        || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6))))
        """
    static let capturing = "(SELECT enabled FROM ferry_capture LIMIT 1) = 1"
    /// The published checksum recorded by ``install(on:tables:origin:)``, nil when the file has none or it cannot be
    /// read; ``publishedOrigin(of:)`` tells the two apart.
    ///
    /// ```swift
    /// if let sha256 = OutboxSchema.origin(of: db) { print("published as \(sha256)") }
    /// ```
    public static func origin(of db: SQLiteConnection) -> String? {
        // For tools and tests that only ask "is there one?"; the client itself uses publishedOrigin, which throws.
        (try? publishedOrigin(of: db)) ?? nil
    }

    /// The published checksum recorded by ``install(on:tables:origin:)``, nil when the file has none (no
    /// `ferry_origin` table, or no valid checksum in it); throws when the file cannot be read.
    ///
    /// ```swift
    /// let sha256 = try OutboxSchema.publishedOrigin(of: db) ?? FileDigest.sha256Hex(of: file)
    /// ```
    public static func publishedOrigin(of db: SQLiteConnection) throws -> String? {
        let hasTable =
            try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ferry_origin'")?.integer
            == 1
        guard hasTable, let text = try db.scalar("SELECT sha256 FROM ferry_origin LIMIT 1")?.text,
            SHA256Hex.isValid(text)
        else { return nil }
        return text
    }

    /// GLOB pattern of a UUID in text form.
    static let uuidGlob: String = {
        let h = "[0-9a-fA-F]"
        return [8, 4, 4, 4, 12].map { String(repeating: h, count: $0) }.joined(separator: "-")
    }()

    /// Installs (or re-installs) the queue and the triggers for `tables`. Idempotent; runs in one transaction.
    /// `origin` is the checksum the file had as published: once local edits change the bytes, it is still the
    /// version's identity for `If-None-Match` and `ferry status` (kept in `ferry_origin`).
    public static func install(on db: SQLiteConnection, tables: [SnapshotMetadata.TableInfo], origin: String? = nil)
        throws
    {
        // Every open installs: where all is in place already, write nothing, so that opening database.db (a fetch
        // that finds nothing new, or fails offline) leaves its bytes and modification time as they were.
        if try isCurrent(on: db, tables: tables, origin: origin) { return }
        try db.transaction {
            try db.execute(queueDDL)
            // A queue made before schema lines: its rows are all of this database's line (NULL); one made before
            // per-column merging: its rows carry no bases (merged by row), its kept edits no server values.
            for (table, column, type) in laterColumns where try !hasColumn(db, table, column) {
                try db.execute("ALTER TABLE \(table) ADD COLUMN \(column) \(type)")
            }
            for table in protectedTables {
                for event in ["INSERT", "UPDATE", "DELETE"] {
                    try db.execute(
                        "DROP TRIGGER IF EXISTS \(SQLIdentifier.quoteSQLite("ferry_protect_\(table)_\(event)"))")
                }
            }
            if let origin {
                try db.execute(
                    "CREATE TABLE IF NOT EXISTS ferry_origin(sha256 TEXT NOT NULL); DELETE FROM ferry_origin;")
                try db.run("INSERT INTO ferry_origin(sha256) VALUES (?)", [.text(origin)])
            }
            for table in tables {
                let columns = try existingColumns(db, table.name)
                try installShadow(for: table, columns: columns, on: db)
                for trigger in try triggers(for: table, existing: columns) {
                    try db.execute(trigger)
                }
            }
            // The snapshot's own description is not for editing: a device that deleted it could no longer tell
            // its version or which tables are writable.
            let existing = Set(
                try db.query("SELECT name FROM sqlite_master WHERE type = 'table'").compactMap { $0.first?.text })
            for table in protectedTables where existing.contains(table) {
                for event in ["INSERT", "UPDATE", "DELETE"] { try db.execute(protectTrigger(table, event)) }
            }
        }
    }

    /// Whether ``install(on:tables:origin:)`` would change nothing in `db`: the queue's tables and index exist with
    /// the capture switch's one row, `ferry_origin` holds `origin`, and every trigger it creates exists with the
    /// same SQL (SQLite keeps a trigger's statement text as given).
    static func isCurrent(on db: SQLiteConnection, tables: [SnapshotMetadata.TableInfo], origin: String?) throws -> Bool
    {
        var objects = Set<String>()
        var triggerSQL = Set<String>()
        for row in try db.query("SELECT type, name, sql FROM sqlite_master") {
            guard row.count == 3, let type = row[0].text, let name = row[1].text else { continue }
            objects.insert("\(type) \(name)")
            if type == "trigger", let sql = row[2].text { triggerSQL.insert(sql) }
        }
        let queue = [
            "table ferry_outbox", "index ferry_outbox_row", "table ferry_capture", "table ferry_base",
            "table ferry_written",
        ]
        guard queue.allSatisfy(objects.contains), try db.scalar("SELECT count(*) FROM ferry_capture")?.integer == 1,
            try laterColumns.allSatisfy({ try hasColumn(db, $0.0, $0.1) })
        else { return false }
        if let origin {
            guard objects.contains("table ferry_origin"),
                try db.query("SELECT sha256 FROM ferry_origin").map({ $0.first?.text }) == [origin]
            else { return false }
        }
        var wanted: [String] = []
        for table in tables {
            let columns = try existingColumns(db, table.name)
            if table.writable {
                guard objects.contains("table \(shadowName(table.name))"), try shadowColumns(db, table.name) == columns
                else { return false }
            }
            wanted += try triggers(for: table, existing: columns).filter { $0.hasPrefix("CREATE TRIGGER") }
        }
        for table in protectedTables where objects.contains("table \(table)") {
            wanted += ["INSERT", "UPDATE", "DELETE"].map { protectTrigger(table, $0) }
        }
        return wanted.allSatisfy(triggerSQL.contains)
    }

    /// Whether `schema`'s `ferry_outbox` has the `line` column (a queue made before schema lines has not).
    static func hasLineColumn(_ db: SQLiteConnection, schema: String = "main") throws -> Bool {
        try hasColumn(db, "ferry_outbox", "line", schema: schema)
    }

    /// Whether `schema`'s `table` has `column` (see ``laterColumns``).
    static func hasColumn(_ db: SQLiteConnection, _ table: String, _ column: String, schema: String = "main") throws
        -> Bool
    {
        try db.query("SELECT name FROM pragma_table_info(?, ?)", [.text(table), .text(schema)]).contains {
            $0.first?.text == column
        }
    }

    /// The trigger that refuses local `event`s on the metadata table `table`.
    static func protectTrigger(_ table: String, _ event: String) -> String {
        let message = SQLIdentifier.literal("ferry: \(table) describes the snapshot and is read-only")
        return
            "CREATE TRIGGER \(SQLIdentifier.quoteSQLite("ferry_protect_\(table)_\(event)")) BEFORE \(event) ON \(SQLIdentifier.quote(table)) WHEN \(capturing) BEGIN SELECT RAISE(ABORT, \(message)); END"
    }

    /// Metadata tables that local statements may read but never change.
    static let protectedTables = ["ferry_snapshot", "ferry_tables", "ferry_origin"]

    /// The name of the table that keeps, for a writable table, the published values of the rows the device wrote
    /// since the version it holds (see `ferry_written`).
    static func shadowName(_ table: String) -> String {
        "ferry_was_" + table.replacingOccurrences(of: "\"", with: "")
    }

    /// The quoted name of ``shadowName(_:)``, for SQL.
    static func shadowTable(_ table: String) -> String {
        SQLIdentifier.quote(shadowName(table))
    }

    /// The columns of `table`'s shadow, empty when it has none.
    static func shadowColumns(_ db: SQLiteConnection, _ table: String) throws -> [String] {
        try db.query("SELECT name FROM pragma_table_info(?)", [.text(shadowName(table))]).compactMap { $0.first?.text }
    }

    /// Creates `table`'s shadow with the table's columns in the table's order, untyped so that every value keeps its
    /// storage class, one row per key. A shadow whose columns no longer match is dropped with its `ferry_written`
    /// entries (a later patch then finds the rows as they are, and falls back to the full download if they differ).
    static func installShadow(for table: SnapshotMetadata.TableInfo, columns: [String], on db: SQLiteConnection) throws
    {
        let shadow = shadowTable(table.name)
        guard table.writable, !table.primaryKey.isEmpty else {
            try db.execute("DROP TABLE IF EXISTS \(shadow)")
            return
        }
        let existing = try shadowColumns(db, table.name)
        if existing == columns { return }
        if !existing.isEmpty {
            try db.execute("DROP TABLE \(shadow)")
            try db.run("DELETE FROM ferry_written WHERE tbl = ?", [.text(table.name)])
        }
        let names = try columns.map { try Self.quoted($0, in: columns, table: table.name) }
        let key = try table.primaryKey.map { try Self.quoted($0, in: columns, table: table.name) }
        try db.execute(
            "CREATE TABLE \(shadow)(\(names.joined(separator: ", ")), UNIQUE (\(key.joined(separator: ", "))))")
    }

    /// The columns SQLite really has for `table`; throws if the table is missing.
    static func existingColumns(_ db: SQLiteConnection, _ table: String) throws -> [String] {
        let rows = try db.query("SELECT name FROM pragma_table_info(?)", [.text(table)])
        guard !rows.isEmpty else {
            throw FerryError(
                .verification, "ferry_tables names table '\(table)' but the snapshot has no such table", path: db.path,
                key: table)
        }
        return rows.compactMap { $0.first?.text }
    }

    /// Quotes an identifier for SQLite (`SQLIdentifier`) after checking it is one of `allowed`.
    static func quoted(_ name: String, in allowed: [String], table: String) throws -> String {
        guard allowed.contains(name), SQLIdentifier.isQuotable(name) else {
            throw FerryError(
                .verification, "column '\(name)' is not a usable column of table '\(table)'", key: "\(table).\(name)")
        }
        return SQLIdentifier.quote(name)
    }

    /// The trigger SQL for one table: capture triggers for writable tables, refusal triggers for the others.
    static func triggers(for table: SnapshotMetadata.TableInfo, existing: [String]) throws -> [String] {
        let t = try quoted(table.name, in: [table.name], table: table.name)
        // Trigger names keep the form devices already hold (the table name without its quotes), so a reinstall
        // drops exactly the triggers an earlier version created.
        let name = table.name.replacingOccurrences(of: "\"", with: "")
        func trigger(_ suffix: String) -> String { SQLIdentifier.quoteSQLite("ferry_\(name)_\(suffix)") }
        var out = ["ins", "upd", "del", "key", "was_ins", "was_upd", "was_del"].map {
            "DROP TRIGGER IF EXISTS \(trigger($0))"
        }
        guard table.writable else {
            let message = SQLIdentifier.literal(
                "ferry: table \(table.name) is read-only on devices (writable: false in the template); only writable tables accept edits"
            )
            for (suffix, event) in [("ins", "INSERT"), ("upd", "UPDATE"), ("del", "DELETE")] {
                out.append(
                    "CREATE TRIGGER \(trigger(suffix)) BEFORE \(event) ON \(t) WHEN \(capturing) BEGIN SELECT RAISE(ABORT, \(message)); END"
                )
            }
            return out
        }
        guard !table.primaryKey.isEmpty else {
            throw FerryError(.verification, "writable table '\(table.name)' has no primary key", key: table.name)
        }
        let pk = try table.primaryKey.map { try quoted($0, in: existing, table: table.name) }
        let stamps = [table.createdColumn, table.updatedColumn].compactMap { $0 }.filter { existing.contains($0) }
        let valueColumns = existing.filter { !table.primaryKey.contains($0) && !stamps.contains($0) }
        let updated = try table.updatedColumn.flatMap {
            existing.contains($0) ? try quoted($0, in: existing, table: table.name) : nil
        }
        let created = try table.createdColumn.flatMap {
            existing.contains($0) ? try quoted($0, in: existing, table: table.name) : nil
        }

        func keyJSON(_ row: String) -> String {
            "json_object("
                + zip(table.primaryKey, pk).map { "\(SQLIdentifier.literal($0.0)), \(row).\($0.1)" }.joined(
                    separator: ", ") + ")"
        }
        func whereKey(_ row: String) -> String {
            pk.map { "\($0) IS \(row).\($0)" }.joined(separator: " AND ")
        }
        let allValues =
            "json_object("
            + (try valueColumns.map {
                "\(SQLIdentifier.literal($0)), NEW.\(try quoted($0, in: existing, table: table.name))"
            }).joined(separator: ", ") + ")"
        // Only the columns that changed: set each changed one, park unchanged ones under a key removed afterwards.
        let changedValues = try valueColumns.reduce("json_object()") { acc, column in
            let q = try quoted(column, in: existing, table: table.name)
            return
                "json_set(\(acc), CASE WHEN NEW.\(q) IS NOT OLD.\(q) THEN \(SQLIdentifier.literal("$.\"\(column)\"")) ELSE '$.\"ferry:unchanged\"' END, NEW.\(q))"
        }
        let changedJSON = "json_remove(\(changedValues), '$.\"ferry:unchanged\"')"
        // The base of each changed column: its value before the edit, kept from the first edit an entry coalesces.
        func baseJSON(_ start: String) throws -> String {
            let set = try valueColumns.reduce(start) { acc, column in
                let q = try quoted(column, in: existing, table: table.name)
                let path = SQLIdentifier.literal("$.\"\(column)\"")
                return
                    "json_set(\(acc), CASE WHEN NEW.\(q) IS NOT OLD.\(q) AND json_type(\(start), \(path)) IS NULL THEN \(path) ELSE '$.\"ferry:unchanged\"' END, OLD.\(q))"
            }
            return "json_remove(\(set), '$.\"ferry:unchanged\"')"
        }
        let coalescedBase = try baseJSON("coalesce(base, '{}')")
        let newBase = try baseJSON("'{}'")
        let tbl = SQLIdentifier.literal(table.name)
        let baseOf = { (row: String) in
            "COALESCE((SELECT updatedAt FROM ferry_base WHERE tbl = \(tbl) AND key = \(keyJSON(row))), \(updated.map { "\(row).\($0)" } ?? "NULL"))"
        }
        func stamp(_ sets: [String]) -> String {
            guard !sets.isEmpty else { return "" }
            return """
                UPDATE ferry_capture SET enabled = 0;
                UPDATE \(t) SET \(sets.joined(separator: ", ")) WHERE \(whereKey("NEW"));
                UPDATE ferry_capture SET enabled = 1;
                """
        }

        // Keys two devices cannot both pick: a single-column key must be a UUID in text form.
        if pk.count == 1 {
            let message = SQLIdentifier.literal(
                "ferry: inserts into \(table.name) need a UUID text primary key (\(table.primaryKey[0])), e.g. lower(hex(randomblob(16))) formatted as a UUID, so two devices never pick the same key"
            )
            out.append(
                """
                CREATE TRIGGER \(trigger("key")) BEFORE INSERT ON \(t) WHEN \(capturing) AND \
                (typeof(NEW.\(pk[0])) != 'text' OR NEW.\(pk[0]) NOT GLOB '\(uuidGlob)')
                BEGIN SELECT RAISE(ABORT, \(message)); END
                """)
        }
        // Before the device's first write of a row since the version it holds, keep that row as published (or
        // that it was absent): a patch puts it back before it applies (``Outbox/restoreWrittenRows(in:tables:)``).
        let shadow = SQLIdentifier.quote(shadowName(table.name))
        for (suffix, event, row) in [
            ("was_ins", "INSERT", "NEW"), ("was_upd", "UPDATE", "OLD"), ("was_del", "DELETE", "OLD"),
        ] {
            let first = "NOT EXISTS (SELECT 1 FROM ferry_written WHERE tbl = \(tbl) AND key = \(keyJSON(row)))"
            out.append(
                """
                CREATE TRIGGER \(trigger(suffix)) BEFORE \(event) ON \(t) WHEN \(capturing) AND \(first) BEGIN
                  INSERT OR IGNORE INTO \(shadow) SELECT * FROM \(t) WHERE \(whereKey(row));
                  INSERT OR IGNORE INTO ferry_written(tbl, key, present) VALUES (\(tbl), \(keyJSON(row)), EXISTS (SELECT 1 FROM \(t) WHERE \(whereKey(row))));
                END
                """)
        }
        let insertStamps =
            (created.map { ["\($0) = COALESCE(NEW.\($0), \(nowSQL))"] } ?? [])
            + (updated.map { ["\($0) = \(nowSQL)"] } ?? [])
        out.append(
            """
            CREATE TRIGGER \(trigger("ins")) AFTER INSERT ON \(t) WHEN \(capturing) BEGIN
              INSERT INTO ferry_outbox(id, tbl, op, key, vals, editedAt, baseUpdatedAt)
                VALUES (\(uuidSQL), \(tbl), 'insert', \(keyJSON("NEW")), \(allValues), \(nowSQL), NULL);
              \(stamp(insertStamps))
            END
            """)
        let keyChange = pk.map { "NEW.\($0) IS NOT OLD.\($0)" }.joined(separator: " OR ")
        out.append(
            """
            CREATE TRIGGER \(trigger("upd")) AFTER UPDATE ON \(t) WHEN \(capturing) BEGIN
              SELECT RAISE(ABORT, \(SQLIdentifier.literal("ferry: the primary key of \(table.name) cannot change; delete the row and insert a new one"))) WHERE \(keyChange);
              INSERT OR IGNORE INTO ferry_base(tbl, key, updatedAt) SELECT \(tbl), \(keyJSON("OLD")), \(updated.map { "OLD.\($0)" } ?? "NULL")
                WHERE NOT EXISTS (SELECT 1 FROM ferry_outbox WHERE tbl = \(tbl) AND key = \(keyJSON("OLD")) AND op = 'insert' AND line IS NULL);
              UPDATE ferry_outbox SET vals = json_patch(vals, \(changedJSON)), editedAt = \(nowSQL),
                base = CASE WHEN op = 'update' THEN \(coalescedBase) ELSE base END
                WHERE seq = (SELECT max(seq) FROM ferry_outbox WHERE tbl = \(tbl) AND key = \(keyJSON("NEW")) AND sent = 0 AND op IN ('insert', 'update') AND line IS NULL);
              INSERT INTO ferry_outbox(id, tbl, op, key, vals, editedAt, baseUpdatedAt, base)
                SELECT \(uuidSQL), \(tbl), 'update', \(keyJSON("NEW")), \(changedJSON), \(nowSQL), \(baseOf("OLD")), \(newBase)
                WHERE changes() = 0;
              \(stamp(updated.map { ["\($0) = \(nowSQL)"] } ?? []))
            END
            """)
        out.append(
            """
            CREATE TRIGGER \(trigger("del")) AFTER DELETE ON \(t) WHEN \(capturing) BEGIN
              INSERT INTO ferry_outbox(id, tbl, op, key, vals, editedAt, baseUpdatedAt)
                SELECT \(uuidSQL), \(tbl), 'delete', \(keyJSON("OLD")), '{}', \(nowSQL), \(baseOf("OLD"))
                WHERE NOT EXISTS (SELECT 1 FROM ferry_outbox WHERE tbl = \(tbl) AND key = \(keyJSON("OLD")) AND op = 'insert' AND sent = 0 AND line IS NULL);
              DELETE FROM ferry_outbox WHERE tbl = \(tbl) AND key = \(keyJSON("OLD")) AND sent = 0 AND op != 'delete' AND line IS NULL;
            END
            """)
        return out
    }
}
