import FerryCore
import Foundation

/// A dataset template (`templates/*.yml`): which PostgreSQL tables become which SQLite tables, and how devices
/// may write them back. Parsed strictly: unknown keys, missing keys and wrong types are ``FerryError``s with code
/// `.badTemplate` that name the file, the key path (e.g. `tables[1].primaryKey`) and the fix.
///
/// ```swift
/// let template = try Template.load(path: "templates/campgrounds.yml")
/// for table in template.tables where table.writable {
///     print(table.name, table.source, table.primaryKey ?? ["(from PostgreSQL)"], table.merge)
/// }
/// ```
///
/// The format is documented in `docs/templates.md`.
public struct Template: Sendable, Equatable {
    /// The file this template was read from (as given to ``load(path:)``).
    public var path: String
    /// Dataset name, `[a-z0-9_-]+`: used in URLs and file names.
    public var dataset: String
    /// Bumped by the operator when the SQLite schema changes incompatibly. Default 1.
    public var schemaVersion: Int
    /// Names of the creation and update timestamp columns. Default `created_at` / `updated_at`.
    public var timestamps: Timestamps
    /// The exported tables, in template order (also the export order).
    public var tables: [Table]
    /// Absolute path of a SQLite DDL file applied to the fresh snapshot instead of derived DDL, if any.
    public var schema: String?

    /// The timestamp column names shared by all tables of a template.
    ///
    /// ```swift
    /// Template.Timestamps(created: "createdAt", updated: "updatedAt")
    /// ```
    public struct Timestamps: Sendable, Equatable {
        /// Column set when a row is created. Default `created_at`.
        public var created: String
        /// Column set on every change; newest-wins compares it. Default `updated_at`.
        public var updated: String

        public init(created: String = "created_at", updated: String = "updated_at") {
            self.created = created
            self.updated = updated
        }
    }

    /// One exported table.
    ///
    /// ```swift
    /// let table = Template.Table(name: "trips", source: "public.trips", primaryKey: ["id"], writable: true)
    /// ```
    public struct Table: Sendable, Equatable {
        /// SQLite table name, `[A-Za-z_][A-Za-z0-9_]*`, not starting with `sqlite_` or `ferry_`.
        public var name: String
        /// PostgreSQL table, optionally schema-qualified (`public.trips`). Default: ``name``.
        public var source: String
        /// The SELECT that produces the rows; nil means all columns of ``source``.
        public var query: String?
        /// Primary key columns as written in the template; nil means "the source table's primary key"
        /// (see ``Template/resolvingPrimaryKeys(using:)``).
        public var primaryKey: [String]?
        /// Columns never exported (redaction).
        public var exclude: [String]
        /// `CREATE INDEX` statements run after the load.
        public var indexes: [String]
        /// Whether devices may upload edits of this table (the outbox). Default false.
        public var writable: Bool
        /// How an edit conflicting with the server's row is settled. Default newest-wins.
        public var merge: MergeRule

        public init(
            name: String, source: String? = nil, query: String? = nil, primaryKey: [String]? = nil, exclude: [String] = [],
            indexes: [String] = [], writable: Bool = false, merge: MergeRule = .newestWins
        ) {
            self.name = name
            self.source = source ?? name
            self.query = query
            self.primaryKey = primaryKey
            self.exclude = exclude
            self.indexes = indexes
            self.writable = writable
            self.merge = merge
        }
    }

    public init(
        path: String, dataset: String, schemaVersion: Int = 1, timestamps: Timestamps = Timestamps(), tables: [Table],
        schema: String? = nil
    ) {
        self.path = path
        self.dataset = dataset
        self.schemaVersion = schemaVersion
        self.timestamps = timestamps
        self.tables = tables
        self.schema = schema
    }

    /// Reads and validates a template file (syntax and values; not yet against PostgreSQL).
    public static func load(path: String) throws -> Template {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw FerryError(.badTemplate, "cannot read the template file: check the --config path", path: path)
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw FerryError(.badTemplate, "the template is not UTF-8 text", path: path)
        }
        return try parse(yaml: text, path: path)
    }

    /// Parses template YAML; `path` names the file in errors and anchors a relative `schema:` path.
    public static func parse(yaml: String, path: String) throws -> Template {
        try TemplateParser(path: path).parse(yaml)
    }

    /// The table with this SQLite name, if the template exports it.
    public func table(named name: String) -> Table? {
        tables.first { $0.name == name }
    }

    /// A copy whose tables all have a ``Table/primaryKey``: those the template left out are read from the source
    /// table's primary key in PostgreSQL. Throws `.badTemplate` naming the table when there is none.
    public func resolvingPrimaryKeys(using pg: PostgresConnection) throws -> Template {
        var copy = self
        for i in copy.tables.indices where copy.tables[i].primaryKey == nil {
            copy.tables[i].primaryKey = try TemplateValidator.sourcePrimaryKey(of: copy.tables[i], index: i, template: self, pg: pg)
        }
        return copy
    }
}
