import FerryCore
import FerryPostgres
import Logging

extension MergeTable {
    /// The merge engine's view of a template table: same names, key, rule (and its per-column settings), timestamp
    /// columns, redactions, renames and query.
    ///
    /// ```swift
    /// let template = try Template.load(path: "templates/trips.yml")
    /// let tables = template.tables.map { MergeTable($0, timestamps: template.timestamps) }
    /// ```
    public init(_ table: Template.Table, timestamps: Template.Timestamps) {
        self.init(
            name: table.name, source: table.source, primaryKey: table.primaryKey ?? [], columns: nil,
            writable: table.writable,
            merge: table.merge, createdColumn: timestamps.created, updatedColumn: timestamps.updated)
        excludedColumns = table.exclude
        columnMerge = table.columnMerge
        renames = table.rename
        query = table.query
        attachments = Set(table.attachments.keys)
    }
}

extension ChangeMerger {
    /// Starts the merger for one template's dataset (only its `writable: true` tables accept changes).
    ///
    /// ```swift
    /// let merger = try await ChangeMerger.start(template: template, databaseURL: url, logger: logger)
    /// ```
    public static func start(template: Template, databaseURL: String, connections: Int = 2, logger: Logger) async throws
        -> ChangeMerger
    {
        try await start(
            dataset: template.dataset, tables: template.tables.map { MergeTable($0, timestamps: template.timestamps) },
            configuration: Configuration(databaseURL: databaseURL, connections: connections), logger: logger,
            scopeTemplate: template.scope != nil || template.partition?.access != nil ? template : nil)
    }
}
