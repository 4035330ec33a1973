import FerryCore
import FerryPostgres
import Foundation

/// One PostgreSQL connection inside `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY` with fixed session settings,
/// and the template resolved into plans within that snapshot. Further sessions can join the same snapshot
/// (``exportSnapshot()``, ``init(joining:template:databaseURL:plans:)``), so parallel exports of several scopes see
/// exactly the same data. The transaction is rolled back when the session is released.
/// Unchecked Sendable: a session is handed to one export thread and used by that thread alone.
final class ExportSession: @unchecked Sendable {
    let pg: PostgresConnection
    let plans: [TablePlan]
    /// The SQL type of the scope values, for a template with `scope:`.
    let scopeTypeName: String?

    /// Opens the first session: begins the transaction, checks the scope queries and resolves the template. With
    /// `snapshotID` (a ``SnapshotHolder``'s) the transaction sees that snapshot: the lines of one publish
    /// (docs/schema-lines.md) all read the same cut of PostgreSQL.
    init(template: Template, databaseURL: String, joining snapshotID: String? = nil) throws {
        pg = try PostgresConnection(url: databaseURL)
        try Self.begin(pg)
        if let snapshotID { try Self.setSnapshot(snapshotID, on: pg) }
        scopeTypeName = try TemplateValidator.scopeTypeName(for: template, pg: pg)
        plans = try TemplateValidator.plans(
            for: template, pg: pg, scopeExpression: scopeTypeName.map(template.scopeExpression(typeName:)))
    }

    /// Opens another session on the snapshot `snapshotID` that a first session exported.
    init(joining snapshotID: String, databaseURL: String, plans: [TablePlan]) throws {
        pg = try PostgresConnection(url: databaseURL)
        try Self.begin(pg)
        try Self.setSnapshot(snapshotID, on: pg)
        self.plans = plans
        scopeTypeName = nil
    }

    /// Must be the transaction's first statement. The id is PostgreSQL's own (hex digits and dashes).
    private static func setSnapshot(_ snapshotID: String, on pg: PostgresConnection) throws {
        try pg.execute("SET TRANSACTION SNAPSHOT '\(snapshotID.filter { $0.isHexDigit || $0 == "-" })'")
    }

    // Ends the read-only export transaction; it wrote nothing, and a dead connection has no transaction to end.
    deinit { try? pg.execute("ROLLBACK") }

    /// `pg_export_snapshot()`: an id other sessions use to see this transaction's snapshot.
    func exportSnapshot() throws -> String {
        guard let id = try pg.query("SELECT pg_export_snapshot()").first?.first ?? nil else {
            throw FerryError(.database, "pg_export_snapshot() returned nothing")
        }
        return id
    }

    static func begin(_ pg: PostgresConnection) throws {
        // Fixed session settings make every text conversion (casts, to_json) independent of server defaults.
        try pg.execute(
            "SET TIME ZONE 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'iso_8601'; SET extra_float_digits = 3"
        )
        try pg.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    }
}

/// A transaction that only holds a snapshot open for the sessions that join it (``ExportSession/init(template:databaseURL:joining:)``):
/// one publish of several schema lines exports each line from this one snapshot. Rolled back when released.
///
/// Not `Sendable`, like the ``PostgresConnection`` it owns: the publish job's thread creates it, reads its
/// ``snapshotID`` and releases it; no other thread or task ever sees it (the compiler checks that).
final class SnapshotHolder {
    let pg: PostgresConnection
    let snapshotID: String

    init(databaseURL: String) throws {
        pg = try PostgresConnection(url: databaseURL)
        try ExportSession.begin(pg)
        guard let id = try pg.query("SELECT pg_export_snapshot()").first?.first ?? nil else {
            throw FerryError(.database, "pg_export_snapshot() returned nothing")
        }
        snapshotID = id
    }

    // It read nothing and wrote nothing; a dead connection has no transaction to end.
    deinit { try? pg.execute("ROLLBACK") }
}
