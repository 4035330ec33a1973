import FerryCore

/// One table of a dataset as the merge engine needs it; the lead maps the publisher's template onto it.
/// Column types are not given here: ``ChangeMerger`` reads them from PostgreSQL's catalog at start-up.
///
/// ```swift
/// let trips = MergeTable(name: "trips", source: "public.trips", primaryKey: ["id"], writable: true, merge: .newestWins)
/// ```
public struct MergeTable: Sendable, Equatable {
    /// The table's name in the snapshot and in change requests.
    public var name: String
    /// The PostgreSQL table (schema-qualified allowed), resolved with `to_regclass`.
    public var source: String
    /// Primary-key columns; empty means the source table's own primary key.
    public var primaryKey: [String]
    /// The columns the template exports (after `query`/`exclude`); nil means every column of `source`.
    /// Changes may only touch these.
    public var columns: [String]?
    /// Whether devices may edit the table (`writable:` in the template).
    public var writable: Bool
    /// The conflict rule (`merge:` in the template).
    public var merge: MergeRule
    /// Whether the rule judges columns (`merge: {per: column}`) and which columns add (`add:`); SQLite names.
    /// Default ``ColumnMerge/rowLevel``: whole rows, as a plain `merge: newest-wins`.
    public var columnMerge: ColumnMerge = .rowLevel
    /// Column the server stamps on insert (`timestamps.created`); nil when the table has none.
    public var createdColumn: String?
    /// Column the server stamps on every write (`timestamps.updated`); required for writable tables.
    public var updatedColumn: String?

    /// Columns the template excludes (`exclude:`): never exported, so never writable from a device.
    public var excludedColumns: [String] = []

    /// The template's `rename:`: SQLite column name → the PostgreSQL column it shows. Changes and answers use the
    /// SQLite names; the SQL uses PostgreSQL's. ``primaryKey``, ``createdColumn`` and ``updatedColumn`` are SQLite
    /// names; ``columns`` and ``excludedColumns`` are PostgreSQL's.
    public var renames: [String: String] = [:]

    /// The template's `query:`, if any. At start-up the merger describes it: only its output columns that are
    /// columns of ``source`` can be written (a computed column is read-only), and a column the query casts to
    /// another type (an older line's type) is answered in that type. `:scope` in it reads as NULL there.
    public var query: String?

    /// The columns that name attachments (the template's `attachments:`, SQLite names): a change may write there only
    /// a SHA-256 the server holds, or null (``HeldAttachments``).
    public var attachments: Set<String> = []

    public init(
        name: String, source: String, primaryKey: [String] = [], columns: [String]? = nil, writable: Bool,
        merge: MergeRule = .newestWins, createdColumn: String? = "created_at", updatedColumn: String? = "updated_at"
    ) {
        self.name = name
        self.source = source
        self.primaryKey = primaryKey
        self.columns = columns
        self.writable = writable
        self.merge = merge
        self.createdColumn = createdColumn
        self.updatedColumn = updatedColumn
    }
}
