import FerryCore
import FerryPostgres
import Foundation
import Logging

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

    /// Opens the first session: begins the transaction, checks the scope queries and resolves the template.
    init(template: Template, databaseURL: String) throws {
        pg = try PostgresConnection(url: databaseURL)
        try Self.begin(pg)
        scopeTypeName = try TemplateValidator.scopeTypeName(for: template, pg: pg)
        plans = try TemplateValidator.plans(for: template, pg: pg, scopeExpression: scopeTypeName.map(ScopeSQL.expression(typeName:)))
    }

    /// Opens another session on the snapshot `snapshotID` that a first session exported.
    init(joining snapshotID: String, databaseURL: String, plans: [TablePlan]) throws {
        pg = try PostgresConnection(url: databaseURL)
        try Self.begin(pg)
        // Must be the transaction's first statement. The id is PostgreSQL's own (hex digits and dashes).
        try pg.execute("SET TRANSACTION SNAPSHOT '\(snapshotID.filter { $0.isHexDigit || $0 == "-" })'")
        self.plans = plans
        scopeTypeName = nil
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

    private static func begin(_ pg: PostgresConnection) throws {
        // Fixed session settings make every text conversion (casts, to_json) independent of server defaults.
        try pg.execute("SET TIME ZONE 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'iso_8601'; SET extra_float_digits = 3")
        try pg.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    }
}

/// What an export produced: the verified SQLite file's row counts and the digest of its data.
struct ExportResult {
    var tables: [String: Int]
    var dataDigest: String
    /// The ``ContentDigest`` of the file's published tables, recorded with the version for devices to check.
    var contentDigest: String
    /// Seconds per step of this export.
    var phases = PublishPhases()
}

/// Streams every table of a template from PostgreSQL into a fresh SQLite file, in one REPEATABLE READ snapshot.
///
/// Steps: one libpq connection, `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`, resolve the template against
/// the catalog, then per table `COPY (SELECT … ORDER BY pk) TO STDOUT (FORMAT binary)` decoded into one prepared
/// INSERT inside one SQLite transaction; then indexes, metadata, COMMIT, ANALYZE, `PRAGMA integrity_check` and
/// per-table row counts against what PostgreSQL sent.
final class SnapshotExporter {
    let template: Template
    let logger: Logger
    var progress: (@Sendable (PublishProgress) -> Void)?
    /// Test hook: called after each table's rows are loaded, while the PostgreSQL snapshot is still open.
    var afterTable: ((String) throws -> Void)?
    /// The scope being written, for progress reports.
    private var scope: String?

    init(template: Template, logger: Logger) {
        self.template = template
        self.logger = logger
    }

    /// Writes one snapshot file from `pg`'s open transaction. With a `scope`, it is set for the transaction
    /// first, so every `:scope` in the plans' SQL reads it.
    func write(plans: [TablePlan], from pg: PostgresConnection, to file: URL, version: Int, createdAt: String, scope: String?) throws -> ExportResult {
        if let scope { _ = try pg.query(ScopeSQL.setScopeSQL, [scope]) }
        self.scope = scope
        var digest = StreamingSHA256()
        digest.update("ferry-data-v1\ndataset=\(template.dataset)\nschemaVersion=\(template.schemaVersion)\n")
        for plan in plans { digest.update(plan.definition) }

        let db = try SQLiteConnection(path: file.path)
        // A fresh temp file nobody else sees: no journal needed. It is fsynced before it is committed to the store.
        try db.execute("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA locking_mode = EXCLUSIVE; PRAGMA cache_size = -32768")
        try db.execute("BEGIN")
        if let schema = template.schema {
            let ddl: String
            do { ddl = try String(contentsOfFile: schema, encoding: .utf8) } catch {
                throw FerryError(.badTemplate, "cannot read schema file \(schema)", path: template.path, key: "schema")
            }
            digest.update("schema=\(ddl)\n")
            do { try db.execute(ddl) } catch let error as FerryError {
                throw FerryError(.badTemplate, "the schema file \(schema) fails in SQLite: \(error.message); fix its DDL", path: template.path, key: "schema")
            }
        } else {
            for plan in plans { try db.execute(plan.createSQL) }
        }

        var phases = PublishPhases()
        var counts: [String: Int] = [:]
        var infos: [SnapshotMetadata.TableInfo] = []
        for plan in plans {
            let rows = try phases.time(.extract) { try load(plan, from: pg, into: db, digest: &digest) }
            counts[plan.name] = rows
            infos.append(
                SnapshotMetadata.TableInfo(
                    name: plan.name, primaryKey: plan.primaryKey, columns: plan.columns.map(\.name), writable: plan.table.writable,
                    merge: plan.table.merge, createdColumn: plan.createdColumn, updatedColumn: plan.updatedColumn, rows: rows))
            try afterTable?(plan.name)
        }

        try phases.time(.indexes) {
            for plan in plans {
                for (j, sql) in plan.table.indexes.enumerated() {
                    do { try db.execute(sql) } catch let error as FerryError {
                        throw FerryError(.badTemplate, "table '\(plan.name)': index fails in SQLite: \(error.message); fix the statement", path: template.path, key: "tables[\(plan.index)].indexes[\(j)]")
                    }
                }
            }
        }
        try phases.time(.commit) {
            let metadata = SnapshotMetadata(dataset: template.dataset, version: version, schemaVersion: template.schemaVersion, createdAt: createdAt, tables: infos)
            try metadata.write(to: db)
            try db.execute("COMMIT")
        }
        try phases.time(.analyze) { try db.execute("ANALYZE") }
        try phases.time(.integrityCheck) { try db.checkIntegrity() }
        try phases.time(.rowCounts) {
            for plan in plans {
                let stored = try db.scalar("SELECT count(*) FROM \(SQLIdentifier.quote(plan.name))")?.integer ?? -1
                guard stored == Int64(counts[plan.name] ?? -2) else {
                    throw FerryError(.verification, "table '\(plan.name)': SQLite holds \(stored) rows but PostgreSQL sent \(counts[plan.name] ?? 0); nothing was published", path: file.path)
                }
            }
        }
        let contentDigest = try phases.time(.contentDigest) { try ContentDigest.compute(db, tables: plans.map(\.name)) }
        return ExportResult(tables: counts, dataDigest: digest.finalizeHex(), contentDigest: contentDigest.description, phases: phases)
    }

    /// Streams one table; returns the row count, checked against PostgreSQL's `COPY n`.
    func load(_ plan: TablePlan, from pg: PostgresConnection, into db: SQLiteConnection, digest: inout StreamingSHA256) throws -> Int {
        let statement: SQLiteStatement
        do { statement = try db.prepare(plan.insertSQL) } catch let error as FerryError {
            throw FerryError(.badTemplate, "table '\(plan.name)': cannot insert into SQLite: \(error.message); make the schema file create this table with these columns: \(plan.columns.map(\.name).joined(separator: ", "))", path: template.path, key: template.schema == nil ? "tables[\(plan.index)]" : "schema")
        }
        let loader = CopyLoader(columns: plan.columns, statement: statement, table: plan.name)
        let start = ContinuousClock.now
        var lastReport = start
        var nextCheck = 16_384
        let progress = self.progress
        let dataset = template.dataset
        let scope = self.scope
        progress?(PublishProgress(dataset: dataset, table: plan.name, rows: 0, seconds: 0, finished: false, scope: scope))
        // The closure cannot capture an inout parameter: hash into a local copy and hand it back.
        digest.update("rows=\(plan.name)\n")
        var localDigest = digest
        let sent: Int
        do {
            sent = try pg.copyOut(plan.copySQL) { message in
                localDigest.update(message)
                try loader.consume(message)
                if let progress, loader.rows >= nextCheck {
                    nextCheck = loader.rows + 16_384
                    let now = ContinuousClock.now
                    if now - lastReport >= .milliseconds(250) {
                        lastReport = now
                        progress(PublishProgress(dataset: dataset, table: plan.name, rows: loader.rows, seconds: (now - start).seconds, finished: false, scope: scope))
                    }
                }
            }
        } catch let error as FerryError where error.code == .database {
            throw FerryError(.database, "table '\(plan.name)': \(error.message)", path: template.path, key: "tables[\(plan.index)]")
        }
        digest = localDigest
        guard loader.finished, sent == loader.rows else {
            throw FerryError(.verification, "table '\(plan.name)': PostgreSQL reported \(sent) rows but \(loader.rows) arrived complete; nothing was published")
        }
        let seconds = (ContinuousClock.now - start).seconds
        progress?(PublishProgress(dataset: dataset, table: plan.name, rows: loader.rows, seconds: seconds, finished: true, scope: scope))
        logger.debug("exported table", metadata: ["table": "\(plan.name)", "rows": "\(loader.rows)", "seconds": "\(seconds)"])
        return loader.rows
    }
}

extension Duration {
    /// The duration in seconds as a Double.
    var seconds: Double {
        let (s, attoseconds) = components
        return Double(s) + Double(attoseconds) / 1e18
    }
}
