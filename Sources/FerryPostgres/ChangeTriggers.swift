import FerryCore
import Foundation

/// What `ferry triggers install` adds to the operator's database so Ferry can publish when a source table changes
/// (docs/freshness.md): one function, `ferry_notify()`, shared by every dataset, and on each source table of the
/// template one statement-level trigger, `ferry_notify_<dataset>`, `AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE`,
/// that calls `pg_notify` on the dataset's channel (``channel(for:)``) with the table's qualified name. Nothing
/// else. A notification is sent when the writing transaction commits, once per statement, and a transaction that
/// rolls back sends none.
///
/// Tables that a `query:` or `filter:` (or the scope's query) read besides the sources are not covered: the install
/// names them as such, and `--also` covers them too.
///
/// ```swift
/// let covered = try ChangeTriggers.install(template, on: pg)
/// ```
public enum ChangeTriggers {
    /// The name of the function every trigger calls.
    public static let function = "ferry_notify"

    /// The channel a dataset's triggers notify: `ferry_<dataset>`.
    public static func channel(for dataset: String) -> String { "ferry_" + dataset }

    /// The trigger's name on each source table.
    public static func triggerName(for dataset: String) -> String { "ferry_notify_" + dataset }

    /// The source tables of `template`, each once, plus `also`, in order.
    public static func tables(of template: Template, also: [String] = []) -> [String] {
        var seen = Set<String>()
        return (template.tables.map(\.source) + also).filter { seen.insert($0).inserted }
    }

    /// Template tables whose rows depend on SQL the triggers cannot see through (a `query:` or a `filter:`), and the
    /// scope's query: the tables they read besides the sources need `--also`.
    public static func uncovered(in template: Template) -> [String] {
        var notes: [String] = []
        for table in template.tables where table.query != nil || table.filter != nil {
            notes.append(
                "table '\(table.name)' has a \(table.query != nil ? "query" : "filter"): tables it reads besides \(table.source) need --also"
            )
        }
        if template.scope != nil { notes.append("the scope's query: tables it reads need --also") }
        return notes
    }

    /// Installs the function and one trigger per table (`CREATE OR REPLACE`: installing twice changes nothing), in
    /// one transaction. Returns the tables covered.
    @discardableResult
    public static func install(_ template: Template, also: [String] = [], on pg: PostgresConnection) throws -> [String]
    {
        let channel = try checkedChannel(template)
        let tables = tables(of: template, also: also)
        var sql = """
            BEGIN;
            CREATE OR REPLACE FUNCTION \(SQLIdentifier.quote(function))() RETURNS trigger LANGUAGE plpgsql AS $ferry$
            BEGIN
              PERFORM pg_notify(TG_ARGV[0], TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME);
              RETURN NULL;
            END
            $ferry$;

            """
        for table in tables {
            sql += """
                CREATE OR REPLACE TRIGGER \(SQLIdentifier.quote(triggerName(for: template.dataset)))
                  AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON \(try qualified(table, template))
                  FOR EACH STATEMENT EXECUTE FUNCTION \(SQLIdentifier.quote(function))(\(SQLIdentifier.literal(channel)));

                """
        }
        sql += "COMMIT;"
        try run(sql, on: pg)
        return tables
    }

    /// Drops the dataset's trigger from each table, and the function once no trigger uses it any more, in one
    /// transaction. A table without the trigger is skipped. Returns the tables it looked at.
    @discardableResult
    public static func remove(_ template: Template, also: [String] = [], on pg: PostgresConnection) throws -> [String] {
        _ = try checkedChannel(template)
        let tables = tables(of: template, also: also)
        var sql = "BEGIN;\n"
        for table in tables {
            sql +=
                "DROP TRIGGER IF EXISTS \(SQLIdentifier.quote(triggerName(for: template.dataset))) ON \(try qualified(table, template));\n"
        }
        sql += """
            DO $ferry$
            BEGIN
              IF NOT EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid WHERE p.proname = \(SQLIdentifier.literal(function))) THEN
                DROP FUNCTION IF EXISTS \(SQLIdentifier.quote(function))();
              END IF;
            END
            $ferry$;
            COMMIT;
            """
        try run(sql, on: pg)
        return tables
    }

    /// The tables of `template`'s dataset that carry its trigger now.
    public static func installed(_ template: Template, on pg: PostgresConnection) throws -> [String] {
        try pg.query(
            """
            SELECT n.nspname || '.' || c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace WHERE t.tgname = $1 ORDER BY 1
            """, [triggerName(for: template.dataset)]
        ).compactMap { $0.first ?? nil }
    }

    private static func run(_ sql: String, on pg: PostgresConnection) throws {
        do {
            try pg.execute(sql)
        } catch let error as FerryError {
            try? pg.execute("ROLLBACK")  // the error below says what failed; nothing was changed
            throw FerryError(
                .database,
                "\(error.message); nothing was changed (the role needs to own the source tables, or the TRIGGER privilege, and CREATE on the schema)",
                key: nil)
        }
    }

    private static func checkedChannel(_ template: Template) throws -> String {
        let name = triggerName(for: template.dataset)
        // PostgreSQL keeps 63 bytes of a name; a longer trigger name or channel would be cut, silently.
        guard name.utf8.count <= 63 else {
            throw FerryError(
                .badTemplate,
                "dataset '\(template.dataset)' is too long for a trigger name (\(name) is over 63 bytes); use a shorter dataset name",
                path: template.path, key: "dataset")
        }
        return channel(for: template.dataset)
    }

    private static func qualified(_ table: String, _ template: Template) throws -> String {
        guard SQLIdentifier.isQualified(table) || SQLIdentifier.isPlain(table) else {
            throw FerryError(
                .badTemplate, "'\(table)' is not a table name Ferry can quote", path: template.path, key: "source")
        }
        return SQLIdentifier.quoteQualified(table)
    }
}
