import FerryCore
import FerryPostgres
import FerryStore
import Foundation
import Logging

/// What an export produced: the verified SQLite file's row counts and the digest of its data.
struct ExportResult {
    var tables: [String: Int]
    var dataDigest: String
    /// The ``ContentDigest`` of the file's published tables, recorded with the version for devices to check; nil
    /// when the data equalled the scope's current version (nothing was checked: the file is thrown away).
    var contentDigest: String?
    /// The file fsynced, hashed and gzipped, ready to store; nil when the data was unchanged.
    var prepared: FileSnapshotStore.PreparedObject?
    /// Seconds per step of this export.
    var phases = PublishPhases()
    /// The file's ``RowIndex`` in `tmp/`, to store beside the object; nil when none was written.
    var rowIndex: URL?
    /// For a version built from the previous one: the rows it kept and changed, and the patch from that version.
    var incremental: IncrementalCounts?
    /// Tables kept from the base without reading PostgreSQL
    /// (``SnapshotExporter/write(plans:from:to:version:createdAt:scope:unchangedDigest:gzipLevel:base:keep:)``).
    var keptTables: [String] = []
    var changeset: Changeset?
    /// True when the file is `changeset` applied to the scope's current version's file (``IncrementalBuild``): the
    /// new version's file exactly as servers build it from the current one, fit to be stored as a step.
    var materialized = false
    /// The file's SHA-256 when it was read for no gzip copy (a step's file).
    var sha256: String?
    /// The share of the file's pages on SQLite's free list, for a file built from the previous version.
    var freeShare: Double?
}

/// Streams every table of a template from PostgreSQL into a SQLite file, in one REPEATABLE READ snapshot.
///
/// Steps: one libpq connection, `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`, resolve the template against
/// the catalog, then per table `COPY (SELECT … ORDER BY pk) TO STDOUT (FORMAT binary)`, decoded on a thread of its
/// own. With an ``IncrementalBase`` (the scope's current version and its ``RowIndex``), each row is compared with
/// that version's and only new, changed and deleted rows are written, to a copy of its file (``IncrementalBuild``);
/// otherwise every row goes through one prepared INSERT into a fresh file inside one SQLite transaction, then
/// indexes, metadata, COMMIT, ANALYZE. Either way the rows' hashes become the new file's row index. The finished
/// file is then read twice side by side: on a thread of its own `PRAGMA quick_check`, per-table row counts against
/// what PostgreSQL sent and, for a fresh file, the ``ContentDigest`` (an incremental build moved it row by row); on
/// the calling thread the stored object's fsync, SHA-256 and gzip copy (``FileSnapshotStore/PreparedObject``), in
/// one pass. Data equal to the scope's current version skips everything after the extract, and an incremental
/// export then has written no file at all.
final class SnapshotExporter {
    let template: Template
    let logger: Logger
    var progress: (@Sendable (PublishProgress) -> Void)?
    /// Test hook: called after each table's rows are loaded, while the PostgreSQL snapshot is still open.
    var afterTable: ((String) throws -> Void)?
    /// The scope being written, for progress reports.
    var scope: String?

    /// The share of free pages above which an incremental build writes no row index, so the scope's next publish
    /// builds a compact file from scratch.
    static let rebuildFreeShare = 0.25

    init(template: Template, logger: Logger) {
        self.template = template
        self.logger = logger
    }

    /// Writes one snapshot file from `pg`'s open transaction. With a `scope`, it is set for the transaction
    /// first, so every `:scope` in the plans' SQL reads it. When the data's digest equals `unchangedDigest` (the
    /// scope's current version's), the file is left unfinished and unchecked: the publisher keeps the current
    /// version and deletes it. With a `base`, the file is built from that version when its row index allows; any
    /// reason it cannot be is logged and the file is built from scratch. The tables named in `keep` are not read
    /// when the file is built from `base`: their rows stay as the base has them (a publish on change, whose triggers
    /// said they did not change).
    func write(
        plans: [TablePlan], from pg: PostgresConnection, to file: URL, version: Int, createdAt: String, scope: String?,
        unchangedDigest: String? = nil, gzipLevel: Int? = 2, base: IncrementalBase? = nil, keep: Set<String> = []
    ) throws -> ExportResult {
        if let scope { _ = try pg.query(ScopeSQL.setScopeSQL, [scope]) }
        self.scope = scope
        let ddl = try schemaDDL()
        let plansDigest = Self.planDigest(
            dataset: template.dataset, schemaVersion: template.schemaVersion, plans: plans, schemaDDL: ddl)
        let indexFile = file.deletingPathExtension().appendingPathExtension("rows")
        let job = Job(
            plans: plans, pg: pg, file: file, indexFile: indexFile, version: version, createdAt: createdAt,
            schemaDDL: ddl, plansDigest: plansDigest,
            unchangedDigest: unchangedDigest, gzipLevel: gzipLevel, keep: keep)
        if let base {
            // Any reason the copy cannot take the changes (SQLite refusing one, the copy failing its checks) is a
            // reason to build from scratch, not to fail: PostgreSQL's snapshot is still open, so the rows read again
            // are the same rows.
            var reason: String?
            do {
                return try writeIncremental(job, base: base)
            } catch let error as IncrementalUnavailable {
                reason = error.description
            } catch let error as FerryError where error.code == .sqlite {
                reason = error.description
            }
            var metadata: Logger.Metadata = [
                "dataset": "\(template.dataset)", "from": "\(base.version)", "reason": "\(reason ?? "")",
            ]
            if let scope { metadata["scope"] = "\(scope)" }
            logger.warning(
                "cannot build this version from the current one; building the file from scratch", metadata: metadata)
            try DurableFile.remove(file)
            try DurableFile.remove(indexFile)
        }
        return try writeFull(job)
    }

    /// The inputs of one export.
    private struct Job {
        let plans: [TablePlan]
        let pg: PostgresConnection
        let file: URL
        let indexFile: URL
        let version: Int
        let createdAt: String
        let schemaDDL: String?
        let plansDigest: String
        let unchangedDigest: String?
        /// The gzip copy's level; nil when the file will likely be stored as a step (no gzip copy is made now).
        let gzipLevel: Int?
        let keep: Set<String>
    }

    func schemaDDL() throws -> String? {
        guard let schema = template.schema else { return nil }
        do { return try String(contentsOfFile: schema, encoding: .utf8) } catch {
            throw FerryError(.badTemplate, "cannot read schema file \(schema)", path: template.path, key: "schema")
        }
    }

    /// The data digest as it starts: what besides the rows makes two exports' data equal.
    private func startDigest(_ job: Job) -> StreamingSHA256 {
        startDigest(plans: job.plans, schemaDDL: job.schemaDDL)
    }

    private static func keyColumns(_ plan: TablePlan) -> [Int] {
        plan.primaryKey.compactMap { key in plan.columns.firstIndex { $0.name == key } }
    }

    private func tableInfo(_ plan: TablePlan, rows: Int) -> SnapshotMetadata.TableInfo {
        SnapshotMetadata.TableInfo(
            name: plan.name, primaryKey: plan.primaryKey, columns: plan.columns.map(\.name),
            writable: plan.table.writable,
            merge: plan.table.merge, createdColumn: plan.createdColumn, updatedColumn: plan.updatedColumn, rows: rows)
    }

    /// Builds the file from the scope's current version (``IncrementalBuild``). Whatever fails before the patch is
    /// applied gives the working copy back unchanged.
    private func writeIncremental(_ job: Job, base: IncrementalBase) throws -> ExportResult {
        let build = try IncrementalBuild(
            base: base, file: job.file, plans: job.plansDigest, recordedTables: job.plans.map(\.name) + ["ferry_tables"]
        )
        var diffs: [TableDiff] = []
        do {
            return try writeIncremental(job, build: build, diffs: &diffs)
        } catch {
            for diff in diffs { diff.releaseStatements() }
            build.giveBack()  // false: the caller removes the file, and the store rebuilds the working copy
            throw error
        }
    }

    private func writeIncremental(_ job: Job, build: IncrementalBuild, diffs: inout [TableDiff]) throws
        -> ExportResult
    {
        let base = build.base
        defer { build.close() }
        let index = try RowIndexWriter(url: job.indexFile, plans: job.plansDigest, hasher: build.hasher)
        var digest = startDigest(job)
        var phases = PublishPhases()
        var counts: [String: Int] = [:]
        var infos: [SnapshotMetadata.TableInfo] = []
        var kept: [String] = []
        for plan in job.plans {
            let diff = try TableDiff(plan: plan, build: build, index: index)
            diffs.append(diff)
            index.beginTable(plan.name)
            let rows: Int
            if job.keep.contains(plan.name) {
                // Not read: the data digest names the rows it kept (the base's file), so it never equals a digest of
                // rows read, and only the row counts below can call this data unchanged.
                rows = try diff.keepAll()
                digest.update("kept=\(plan.name)@\(base.snapshot.lastPathComponent)\n")
                kept.append(plan.name)
            } else {
                let loader = CopyLoader(
                    columns: plan.columns, target: .diff(diff), table: plan.name, keyColumns: Self.keyColumns(plan),
                    index: index)
                rows = try phases.time(.extract) {
                    let rows = try load(plan, with: loader, from: job.pg, digest: &digest)
                    try diff.finish(loader: loader)
                    return rows
                }
            }
            try index.endTable()
            counts[plan.name] = rows
            infos.append(tableInfo(plan, rows: rows))
            try afterTable?(plan.name)
        }
        var dataDigest = digest.finalizeHex()
        if build.counts.changed == 0, let unchanged = job.unchangedDigest {
            // No row differs from the base (the rows read, and any kept from it): the data is the current version's,
            // even when the digests differ because one of the two publishes kept tables without reading them.
            dataDigest = unchanged
        }
        if dataDigest == job.unchangedDigest {
            for diff in diffs { diff.releaseStatements() }
            if !build.giveBack() { try DurableFile.remove(job.file) }
            try DurableFile.remove(job.indexFile)
            var result = ExportResult(
                tables: counts, dataDigest: dataDigest, contentDigest: nil, prepared: nil, phases: phases,
                incremental: build.counts)
            result.keptTables = kept
            return result
        }
        var result = try finishIncremental(
            job, build: build, diffs: diffs, index: index, tables: (counts, infos), dataDigest: dataDigest,
            phases: &phases)
        result.keptTables = kept
        return result
    }

    /// Takes the step the build recorded and applies it (``IncrementalBuild/finish(metadata:)``, then
    /// ``IncrementalBuild/materialize(_:expected:diffs:)``), finishes the row index, and checks the file.
    private func finishIncremental(
        _ job: Job, build: IncrementalBuild, diffs: [TableDiff], index: RowIndexWriter,
        tables: (counts: [String: Int], infos: [SnapshotMetadata.TableInfo]), dataDigest: String,
        phases: inout PublishPhases
    ) throws -> ExportResult {
        let (counts, infos) = tables
        let metadata = SnapshotMetadata(
            dataset: template.dataset, version: job.version, schemaVersion: template.schemaVersion,
            createdAt: job.createdAt, tables: infos, attachments: job.plans.flatMap(\.table.attachmentColumns))
        let changeset = try phases.time(.commit) { try build.finish(metadata: metadata) }
        if !build.taken { phases.add(.clone, build.cloneSeconds) }  // a copy of a checkpoint's file was made
        let expected = PublishedVersion(
            version: job.version, sha256: "", size: 0, gzipSize: 0, createdAt: job.createdAt,
            schemaVersion: template.schemaVersion, tables: counts, contentDigest: build.digest.description)
        let rowids = try phases.time(.commit) { try build.materialize(changeset, expected: expected, diffs: diffs) }
        // Rows deleted or moved leave free pages; a file built again from scratch has none.
        let free = try Publisher.freeShare(of: job.file)
        build.close()
        var rowIndex: URL? = job.indexFile
        if free > Self.rebuildFreeShare {
            logger.info(
                "the scope's next publish builds its file from scratch",
                metadata: [
                    "dataset": "\(template.dataset)", "scope": "\(scope ?? "")", "freePages": "\(Int(free * 100))%",
                ])
            try DurableFile.remove(job.indexFile)
            rowIndex = nil
        } else {
            try index.finish(rowids: rowids)
        }
        var result = try check(job, counts: counts, dataDigest: dataDigest, digestFromFile: false, phases: &phases)
        result.contentDigest = build.digest.description
        result.rowIndex = rowIndex
        result.incremental = build.counts
        result.changeset = changeset
        result.materialized = true
        result.freeShare = free
        return result
    }

    /// Builds the file from scratch.
    private func writeFull(_ job: Job) throws -> ExportResult {
        var digest = startDigest(job)
        var phases = PublishPhases()
        var counts: [String: Int] = [:]
        var index: RowIndexWriter?
        let dataDigest: String
        // The writing connection lives in this block: the file is closed before it is read again below.
        do {
            let db = try SQLiteConnection(path: job.file.path)
            index = try createTables(in: db, job)

            var infos: [SnapshotMetadata.TableInfo] = []
            for plan in job.plans {
                let statement: SQLiteStatement
                do { statement = try db.prepare(plan.insertSQL) } catch let error as FerryError {
                    throw FerryError(
                        .badTemplate,
                        "table '\(plan.name)': cannot insert into SQLite: \(error.message); make the schema file create this table with these columns: \(plan.columns.map(\.name).joined(separator: ", "))",
                        path: template.path, key: template.schema == nil ? "tables[\(plan.index)]" : "schema")
                }
                index?.beginTable(plan.name)
                let loader = CopyLoader(
                    columns: plan.columns, target: .insert(statement), table: plan.name,
                    keyColumns: Self.keyColumns(plan), index: index)
                let rows = try phases.time(.extract) { try load(plan, with: loader, from: job.pg, digest: &digest) }
                try index?.endTable()
                counts[plan.name] = rows
                infos.append(tableInfo(plan, rows: rows))
                try afterTable?(plan.name)
            }
            dataDigest = digest.finalizeHex()
            if dataDigest == job.unchangedDigest {
                index = nil
                try DurableFile.remove(job.indexFile)
                return ExportResult(
                    tables: counts, dataDigest: dataDigest, contentDigest: nil, prepared: nil, phases: phases)
            }

            try phases.time(.indexes) { try createIndexes(in: db, job) }
            try phases.time(.commit) {
                let metadata = SnapshotMetadata(
                    dataset: template.dataset, version: job.version, schemaVersion: template.schemaVersion,
                    createdAt: job.createdAt, tables: infos, attachments: job.plans.flatMap(\.table.attachmentColumns))
                try metadata.write(to: db)
                try db.execute("COMMIT")
            }
            try phases.time(.analyze) { try db.execute("ANALYZE") }
        }
        try index?.finish()
        var result = try check(job, counts: counts, dataDigest: dataDigest, digestFromFile: true, phases: &phases)
        result.rowIndex = index?.url
        return result
    }

    /// Sets up a fresh file for writing and creates its tables (the schema file's DDL, or the template's). Returns
    /// the writer of its row index, or nil when a table's rowids cannot key one (then each publish builds afresh).
    private func createTables(in db: SQLiteConnection, _ job: Job) throws -> RowIndexWriter? {
        // A fresh temp file nobody else sees: no journal needed. It is fsynced before it is committed to the store.
        // A 16 MiB page cache: rows arrive in key order (appends) and CREATE INDEX sorts in a buffer as large as
        // the cache on top of it, so this bounds the export's peak memory (bench, 2M rows: 110 MB at 32 MiB).
        try db.execute(
            "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA locking_mode = EXCLUSIVE; PRAGMA cache_size = -16384"
        )
        try db.execute("BEGIN")
        if let ddl = job.schemaDDL, let schema = template.schema {
            do { try db.execute(ddl) } catch let error as FerryError {
                throw FerryError(
                    .badTemplate, "the schema file \(schema) fails in SQLite: \(error.message); fix its DDL",
                    path: template.path, key: "schema")
            }
        } else {
            for plan in job.plans { try db.execute(plan.createSQL) }
        }
        // A row index needs every table to have rowids that no column hides (not WITHOUT ROWID, no column
        // named rowid): without one, each publish builds from scratch.
        if job.plans.allSatisfy({ plan in
            !plan.columns.contains { ["rowid", "oid", "_rowid_"].contains($0.name.lowercased()) }
                // the probe: fails for WITHOUT ROWID
                && (try? db.prepare("SELECT rowid FROM \(SQLIdentifier.quote(plan.name)) LIMIT 0")) != nil
        }) {
            return try RowIndexWriter(url: job.indexFile, plans: job.plansDigest, hasher: RowHasher())
        }
        return nil
    }

    /// Runs the template's `indexes:` statements on the finished tables.
    private func createIndexes(in db: SQLiteConnection, _ job: Job) throws {
        for plan in job.plans {
            for (j, sql) in plan.table.indexes.enumerated() {
                do { try db.execute(sql) } catch let error as FerryError {
                    throw FerryError(
                        .badTemplate,
                        "table '\(plan.name)': index fails in SQLite: \(error.message); fix the statement",
                        path: template.path, key: "tables[\(plan.index)].indexes[\(j)]")
                }
            }
        }
    }

    /// Reads the finished file twice side by side (the machine's second core): the checks (and, for a fresh file,
    /// the content digest) on a thread of their own, the stored object's fsync, hash and gzip copy on this one.
    private func check(
        _ job: Job, counts: [String: Int], dataDigest: String, digestFromFile: Bool, phases: inout PublishPhases
    ) throws -> ExportResult {
        let tables = job.plans.map(\.name)
        let (file, checked) = (job.file, counts)
        let attachments = job.plans.filter { !$0.table.attachments.isEmpty }.map {
            AttachmentCheck(table: $0.name, columns: $0.table.attachments.keys.sorted(), primaryKey: $0.primaryKey)
        }
        let templatePath = template.path
        let verification = ThreadJob(name: "ferry.verify") {
            try Self.verify(
                file, tables: tables, counts: checked, digest: digestFromFile, attachments: attachments,
                templatePath: templatePath)
        }
        var prepared: FileSnapshotStore.PreparedObject?
        var sha256: String?
        do {
            if let level = job.gzipLevel {
                prepared = try phases.time(.store) {
                    try FileSnapshotStore.PreparedObject(file: file, encoding: .igzip(level: level))
                }
            } else if !digestFromFile {
                // A step's file (built from the current version): its SHA-256 for the record, read beside the checks.
                sha256 = try phases.time(.store) { try FileDigest.sha256Hex(of: file) }
            }
        } catch {
            // The verification thread still reads the file: let it finish before the caller clears tmp/. This
            // error is the one to report; the verification's outcome no longer matters.
            _ = try? verification.join()
            throw error
        }
        let (contentDigest, checkPhases): (ContentDigest?, PublishPhases)
        do { (contentDigest, checkPhases) = try verification.join() } catch let error as FerryError
            where !digestFromFile && error.code == .verification
        {
            try? prepared?.discard()  // tmp/ is cleared anyway; the failed check is what matters
            throw IncrementalUnavailable(description: error.message)
        }
        phases.add(checkPhases)
        var result = ExportResult(
            tables: counts, dataDigest: dataDigest, contentDigest: contentDigest?.description, prepared: prepared,
            phases: phases)
        result.sha256 = sha256
        return result
    }

    /// Checks a finished file on a read-only connection of its own: `PRAGMA quick_check`, each table's row
    /// count against what PostgreSQL sent, then (with `digest`) the ``ContentDigest`` of `tables`.
    ///
    /// `quick_check`, not `integrity_check`: this file is the publisher's own, built moments ago. `quick_check`
    /// reads every page and checks the b-trees, records and NOT NULL/CHECK constraints; the row counts prove each
    /// table holds every row PostgreSQL sent, and the ``ContentDigest``, read back from this file (or, for an
    /// incremental build, moved by every row written, each read back), proves their content. What
    /// `integrity_check` adds is an index-vs-table comparison for every index, indexes SQLite itself maintains: a
    /// second pass over the whole file that proves nothing the steps here leave open.
    private static func verify(
        _ file: URL, tables: [String], counts: [String: Int], digest: Bool, attachments: [AttachmentCheck] = [],
        templatePath: String = ""
    ) throws -> (ContentDigest?, PublishPhases) {
        var phases = PublishPhases()
        let db = try SQLiteConnection(path: file.path, mode: .readOnly)
        try phases.time(.quickCheck) { try db.checkIntegrity(quick: true) }
        for check in attachments { try check.run(on: db, templatePath: templatePath) }
        try phases.time(.rowCounts) {
            for table in tables {
                let stored = try db.scalar("SELECT count(*) FROM \(SQLIdentifier.quote(table))")?.integer ?? -1
                guard stored == Int64(counts[table] ?? -2) else {
                    throw FerryError(
                        .verification,
                        "table '\(table)': SQLite holds \(stored) rows but PostgreSQL sent \(counts[table] ?? 0); nothing was published",
                        path: file.path)
                }
            }
        }
        guard digest else { return (nil, phases) }
        let contentDigest = try phases.time(.contentDigest) { try ContentDigest.compute(db, tables: tables) }
        return (contentDigest, phases)
    }
}
