import FerryCore
import FerryPostgres

/// The merge engine's own tables in PostgreSQL.
///
/// - `ferry_changes`: one row per processed change id with the answer sent, written in the same transaction as
///   the change itself (exactly once: a resent id gets this answer back and nothing is written again).
/// - `ferry_tombstones`: one row per deleted key (docs/merge-rules.md, "Tombstones"), so a later edit or re-insert of
///   that key from a device still holding an old snapshot is answered `gone`.
///
/// Every merged change inserts a row into `ferry_changes`, so its indexes are kept cheap to write: the id compares
/// bytewise (`COLLATE "C"`: a change id is a UUID, and the database's own collation made each key comparison a
/// `strcoll`), and the retention sweep finds old answers through a BRIN index on `processed_at` (answers arrive in
/// time order) instead of a second B-tree; the answer is JSON kept as `text`, which PostgreSQL stores without
/// parsing it (it was `jsonb`: query it as `result::jsonb`). Tables made before get the indexes on the next start
/// (``migrations``).
enum ChangeLog {
    static let ddl = """
        CREATE TABLE IF NOT EXISTS ferry_changes(
          id text COLLATE "C" PRIMARY KEY,
          dataset text NOT NULL,
          client_id text NOT NULL,
          result text NOT NULL,
          processed_at timestamptz NOT NULL);
        CREATE INDEX IF NOT EXISTS ferry_changes_processed_brin ON ferry_changes USING brin(processed_at);
        CREATE TABLE IF NOT EXISTS ferry_tombstones(
          dataset text NOT NULL,
          tbl text NOT NULL,
          key jsonb NOT NULL,
          deleted_at timestamptz NOT NULL,
          PRIMARY KEY (dataset, tbl, key));
        CREATE INDEX IF NOT EXISTS ferry_tombstones_deleted_at ON ferry_tombstones(dataset, deleted_at);
        """

    /// Brings a `ferry_changes` made by an earlier Ferry to the shape of ``ddl``: its id compared bytewise (the
    /// primary-key index is rebuilt once; the table is not rewritten), and the B-tree on `(dataset, processed_at)`
    /// replaced by the BRIN index. Each step runs only where it is still needed, so a later start changes nothing.
    static let migrations = """
        DO $$
        BEGIN
          IF EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
                     WHERE a.attrelid = 'ferry_changes'::regclass AND a.attname = 'id' AND c.collname <> 'C') THEN
            ALTER TABLE ferry_changes ALTER COLUMN id TYPE text COLLATE "C";
          END IF;
        END $$;
        DROP INDEX IF EXISTS ferry_changes_processed_at;
        """

    /// The statement that stores a batch's answers (``ChangeMerger/storeAnswers(_:context:commit:on:)``): `$1`
    /// the change ids as a text array and `$5` their answers (JSON text) joined by U+001E, which JSON text never
    /// holds unescaped (splitting it costs PostgreSQL less than parsing a quoted array literal). A `ferry_changes` made before issue 41
    /// holds its answers as `jsonb`, which PostgreSQL parses on every insert; such a table keeps working, and
    /// `ALTER TABLE ferry_changes ALTER COLUMN result TYPE text` (a rewrite of the table) makes it as fast.
    static func storeAnswersSQL(on pg: PostgresConnection) throws -> (sql: String, answersAreJSONB: Bool) {
        let type =
            try pg.run(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'ferry_changes'::regclass AND attname = 'result'"
            ).first?.first ?? nil
        let jsonb = type == "jsonb"
        return (
            """
            INSERT INTO ferry_changes(id, dataset, client_id, result, processed_at)
            SELECT a.id, $2, $3, a.result\(jsonb ? "::jsonb" : ""), $4::timestamptz FROM unnest($1::text[], string_to_array($5, chr(30))) AS a(id, result)
            """, jsonb
        )
    }

    /// Creates the tables if missing and migrates older ones (``migrations``); an advisory lock keeps two servers
    /// starting at once from racing.
    static func install(on pg: PostgresConnection) throws {
        // Without the NOTICEs of IF [NOT] EXISTS ("relation … already exists, skipping") on every start.
        try pg.execute(
            "BEGIN; SET LOCAL client_min_messages = warning; SELECT pg_advisory_xact_lock(7301700); \(ddl) \(migrations) COMMIT;"
        )
    }

    /// Deletes `dataset`'s tombstones deleted before `cutoff`: how many.
    static func pruneTombstones(dataset: String, before cutoff: String, on pg: PostgresConnection) throws -> Int {
        try prune("ferry_tombstones", by: "deleted_at", dataset: dataset, before: cutoff, on: pg)
    }

    /// Deletes `dataset`'s stored answers processed before `cutoff`: how many.
    static func pruneChanges(dataset: String, before cutoff: String, on pg: PostgresConnection) throws -> Int {
        try prune("ferry_changes", by: "processed_at", dataset: dataset, before: cutoff, on: pg)
    }

    /// Deletes the rows of `table` (one of Ferry's own) whose timestamp `column` is before `cutoff`.
    private static func prune(
        _ table: String, by column: String, dataset: String, before cutoff: String, on pg: PostgresConnection
    ) throws -> Int {
        let rows = try pg.run(
            "WITH d AS (DELETE FROM \(table) WHERE dataset = $1 AND \(column) < $2::timestamptz RETURNING 1) SELECT count(*)::text FROM d",
            [dataset, cutoff])
        let value = rows.first?.first ?? nil
        return Int(value ?? "0") ?? 0
    }

    /// A PostgreSQL text-array literal (`{"a","b",NULL}`) for binding many values as one parameter. Built on UTF-8
    /// bytes: a batch binds a few of these with hundreds of values each.
    static func arrayLiteral(_ values: [String?]) -> String {
        let quote = UInt8(ascii: "\"")
        let backslash = UInt8(ascii: "\\")
        var bytes: [UInt8] = []
        bytes.reserveCapacity(values.reduce(2) { $0 + ($1?.utf8.count ?? 4) + 3 })
        bytes.append(UInt8(ascii: "{"))
        for (i, value) in values.enumerated() {
            if i > 0 { bytes.append(UInt8(ascii: ",")) }
            guard let value else {
                bytes.append(contentsOf: "NULL".utf8)
                continue
            }
            bytes.append(quote)
            let utf8 = value.utf8
            if utf8.contains(where: { $0 == quote || $0 == backslash }) {
                for byte in utf8 {
                    if byte == quote || byte == backslash { bytes.append(backslash) }
                    bytes.append(byte)
                }
            } else {
                bytes.append(contentsOf: utf8)
            }
            bytes.append(quote)
        }
        bytes.append(UInt8(ascii: "}"))
        return String(decoding: bytes, as: UTF8.self)
    }
}
