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
    /// How the error for a template file that cannot be read begins (the CLI appends the option that fixes it).
    public static let unreadableFileMessage = "cannot read the template file"

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
    /// Access rights (`scope:`): one snapshot per scope value, served only to tokens of that scope. Nil: public.
    public var scope: Scope?
    /// Partitions (`partition:`): one stream per partition key plus one for the shared tables; devices subscribe to
    /// the partitions they work on (docs/partitions.md). Never together with ``scope``.
    public var partition: Partition?

    /// The `scope:` section: which scope values exist, and which scope a bearer token belongs to.
    ///
    /// ```yaml
    /// scope:
    ///   values: "SELECT DISTINCT access_tier FROM users"     # or a literal list: [0, 1, 2]
    ///   token: "SELECT access_tier FROM users WHERE api_token_sha256 = $1"
    ///   # or, for JWTs from an identity provider: claim: team   (docs/access-rights.md)
    /// ```
    public struct Scope: Sendable, Equatable {
        /// Where the scope values come from.
        public enum Values: Sendable, Equatable {
            /// A one-column SELECT, run in the publish's snapshot.
            case query(String)
            /// Literal values, in their text form (integers normalised: `01` → `1`).
            case list([String])

            /// The SELECT, when the values come from one.
            public var query: String? {
                if case .query(let sql) = self { return sql }
                return nil
            }
        }
        public var values: Values
        /// How a bearer token's scope is found: a token query (opaque tokens) or a claim of a verified JWT.
        public var check: Check

        /// The two kinds of token check; a template uses one.
        public enum Check: Sendable, Equatable {
            /// `token:` a one-column SELECT with one parameter, `$1`: the lowercase SHA-256 hex of a bearer token.
            /// Its first row's value is the token's scope; no row means the token is not authorised.
            case token(String)
            /// `claim:` the claim (a path such as `realm_access.team`) of a JWT verified against the server's JWKS
            /// (`ferry serve --jwks`) whose string or integer value is the token's scope.
            case claim(ClaimPath)
        }

        /// The token query, for a template with `token:`.
        public var token: String? {
            if case .token(let sql) = check { return sql }
            return nil
        }

        /// The claim path, for a template with `claim:`.
        public var claim: ClaimPath? {
            if case .claim(let path) = check { return path }
            return nil
        }

        public init(values: Values, token: String) {
            self.values = values
            self.check = .token(token)
        }

        public init(values: Values, claim: ClaimPath) {
            self.values = values
            self.check = .claim(claim)
        }
    }

    /// A child table's link to its parent (`parent: {table, column}`): a row is exported only when the row of
    /// `table` whose primary key equals this row's `column` is exported.
    public struct Parent: Sendable, Equatable {
        /// The parent's SQLite table name (a table of the same template).
        public var table: String
        /// This table's column holding the parent's key.
        public var column: String

        public init(table: String, column: String) {
            self.table = table
            self.column = column
        }
    }

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
        /// Whether ``merge`` judges columns rather than rows (`per: column`), and which columns add (`add:`).
        /// Default ``ColumnMerge/rowLevel``.
        public var columnMerge: ColumnMerge = .rowLevel
        /// A SQL boolean over the source table's columns (`tier <= :scope`); only matching rows are exported.
        /// `:scope` is the scope value, bound (never spliced) as the type of the scope values.
        public var filter: String?
        /// Export only rows whose parent row is exported (composes with ``filter``; chains follow).
        public var parent: Parent?
        /// In a partitioned template, the PostgreSQL column holding the row's partition key (`partition: project_id`).
        public var partition: String?
        /// `rename:`: SQLite column name → the PostgreSQL column (of ``query``'s output, or of ``source``) it shows.
        /// ``primaryKey`` and the template's ``Template/timestamps`` name SQLite columns; ``exclude``, ``filter``,
        /// ``query`` and ``Parent/column`` name PostgreSQL columns.
        public var rename: [String: String]
        /// `attachments:`: the SQLite columns that name attachments (a SHA-256, or NULL), and when devices download
        /// them. A value that is neither fails the publish.
        public var attachments: [String: Attachment.Download] = [:]

        /// ``attachments`` as sorted ``AttachmentColumn``s.
        public var attachmentColumns: [AttachmentColumn] {
            attachments.sorted { $0.key < $1.key }.map {
                AttachmentColumn(table: name, column: $0.key, download: $0.value)
            }
        }

        public init(
            name: String, source: String? = nil, query: String? = nil, primaryKey: [String]? = nil,
            exclude: [String] = [],
            indexes: [String] = [], writable: Bool = false, merge: MergeRule = .newestWins, filter: String? = nil,
            parent: Parent? = nil, rename: [String: String] = [:]
        ) {
            self.name = name
            self.source = source ?? name
            self.query = query
            self.primaryKey = primaryKey
            self.exclude = exclude
            self.indexes = indexes
            self.writable = writable
            self.merge = merge
            self.filter = filter
            self.parent = parent
            self.rename = rename
        }

        /// The PostgreSQL column that SQLite column `sqliteName` shows (itself unless renamed).
        ///
        /// ```swift
        /// Template.Table(name: "items", rename: ["title": "name"]).sourceColumn(of: "title")   // "name"
        /// ```
        public func sourceColumn(of sqliteName: String) -> String {
            rename[sqliteName] ?? sqliteName
        }

        /// The SQLite column that shows PostgreSQL column `sourceName` (itself unless renamed).
        ///
        /// ```swift
        /// Template.Table(name: "items", rename: ["title": "name"]).sqliteColumn(of: "name")   // "title"
        /// ```
        public func sqliteColumn(of sourceName: String) -> String {
            rename.first { $0.value == sourceName }?.key ?? sourceName
        }
    }

    public init(
        path: String, dataset: String, schemaVersion: Int = 1, timestamps: Timestamps = Timestamps(), tables: [Table],
        schema: String? = nil, scope: Scope? = nil
    ) {
        self.path = path
        self.scope = scope
        self.dataset = dataset
        self.schemaVersion = schemaVersion
        self.timestamps = timestamps
        self.tables = tables
        self.schema = schema
    }

    /// Every table's ``Table/attachmentColumns``, in table order.
    public var attachmentColumns: [AttachmentColumn] { tables.flatMap(\.attachmentColumns) }

    /// Reads and validates a template file (syntax and values; not yet against PostgreSQL).
    public static func load(path: String) throws -> Template {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw FerryError(
                .badTemplate, Self.unreadableFileMessage + ": check that the path names an existing, readable file",
                path: path)
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
    /// table's primary key in PostgreSQL, in SQLite names (through ``Table/rename``). Throws `.badTemplate` naming
    /// the table when there is none.
    public func resolvingPrimaryKeys(using pg: PostgresConnection) throws -> Template {
        var copy = self
        for i in copy.tables.indices where copy.tables[i].primaryKey == nil {
            copy.tables[i].primaryKey = try TemplateValidator.sourcePrimaryKey(
                of: copy.tables[i], index: i, template: self, pg: pg
            ).map(copy.tables[i].sqliteColumn(of:))
        }
        return copy
    }
}
