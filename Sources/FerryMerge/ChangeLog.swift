import FerryCore
import FerryPostgres

/// The merge engine's own tables in PostgreSQL.
///
/// - `ferry_changes`: one row per processed change id with the answer sent, written in the same transaction as
///   the change itself (exactly once: a resent id gets this answer back and nothing is written again).
/// - `ferry_tombstones`: one row per deleted key (the book's `deleted_records`), so a later edit or re-insert of
///   that key from a device still holding an old snapshot is answered `gone`.
enum ChangeLog {
    static let ddl = """
        CREATE TABLE IF NOT EXISTS ferry_changes(
          id text PRIMARY KEY,
          dataset text NOT NULL,
          client_id text NOT NULL,
          result jsonb NOT NULL,
          processed_at timestamptz NOT NULL);
        CREATE INDEX IF NOT EXISTS ferry_changes_processed_at ON ferry_changes(dataset, processed_at);
        CREATE TABLE IF NOT EXISTS ferry_tombstones(
          dataset text NOT NULL,
          tbl text NOT NULL,
          key jsonb NOT NULL,
          deleted_at timestamptz NOT NULL,
          PRIMARY KEY (dataset, tbl, key));
        CREATE INDEX IF NOT EXISTS ferry_tombstones_deleted_at ON ferry_tombstones(dataset, deleted_at);
        """

    /// Creates the tables if missing; an advisory lock keeps two servers starting at once from racing.
    static func install(on pg: PostgresConnection) throws {
        try pg.execute("BEGIN; SELECT pg_advisory_xact_lock(7301700); \(ddl) COMMIT;")
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
