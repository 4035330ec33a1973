import FerryCore

extension Template {
    /// The `partition:` section: which table's rows are the partitions, their key, which keys exist, and which keys a
    /// bearer token may read (docs/partitions.md).
    ///
    /// ```yaml
    /// partition:
    ///   table: projects
    ///   key: id
    ///   values: "SELECT id FROM projects WHERE NOT archived"          # optional
    ///   access: "SELECT project_id FROM project_members WHERE token_sha256 = $1"   # optional
    /// ```
    public struct Partition: Sendable, Equatable {
        /// The SQLite name of the table whose rows are the partitions (a table of the template).
        public var table: String
        /// Its PostgreSQL column holding the partition key.
        public var key: String
        /// A one-column SELECT of the keys that exist; nil: every key of ``table``.
        public var values: String?
        /// A one-column SELECT with `$1`, the SHA-256 hex of a bearer token: the keys the token may read. Nil: the
        /// dataset is public.
        public var access: String?

        public init(table: String, key: String, values: String? = nil, access: String? = nil) {
            self.table = table
            self.key = key
            self.values = values
            self.access = access
        }
    }

    /// How a table of a partitioned template places its rows.
    public enum Placement: Sendable, Equatable {
        /// Every device carries the table whole.
        case shared
        /// The row's partition is the value of this PostgreSQL column.
        case column(String)
        /// The row follows its parent row (``Table/parent``).
        case parent
    }

    /// Whether the template has several streams (a scope's or a partition's), each a snapshot of its own.
    public var hasStreams: Bool { scope != nil || partition != nil }

    /// Where the rows of table `index` go in a partitioned template (``Placement/shared`` without `partition:`).
    public func placement(ofTableAt index: Int) -> Placement {
        let table = tables[index]
        if let column = table.partition { return .column(column) }
        if partition != nil, table.parent != nil { return .parent }
        return .shared
    }

    /// The SELECT of the partition keys: `partition.values`, or every key of the partition table (its filter
    /// applied). Nil without `partition:`.
    public var partitionValuesSQL: String? {
        guard let partition else { return nil }
        if let values = partition.values { return values }
        guard let table = table(named: partition.table) else { return nil }
        let source = table.query.map { "(\($0))" } ?? SQLIdentifier.quoteQualified(table.source)
        let filter = table.filter.map { " WHERE (\($0))" } ?? ""
        return "SELECT DISTINCT ferry_k.\(SQLIdentifier.quote(partition.key)) FROM \(source) AS ferry_k\(filter)"
    }

    /// What `:scope` and the partition conditions stand for, given the SQL name of the scope (or partition key)
    /// type. A scoped template compares with one value; a partitioned one with the array of keys set for the
    /// transaction, one per line (`ferry.scope` is one key when a partition is exported, the empty string, so no
    /// key, for the shared stream, and the keys a token may read when an edit is checked).
    public func scopeExpression(typeName: String) -> String {
        guard partition != nil else { return ScopeSQL.expression(typeName: typeName) }
        return "(string_to_array(current_setting('ferry.scope'), E'\\n')::\(typeName)[])"
    }

    /// The condition a partitioned template adds to table `index`'s rows, over the row alias `alias`, given
    /// ``scopeExpression(typeName:)``: a shared table's rows are in the shared stream only, a column-placed table's in
    /// the partitions its column names; a parent-placed one follows its parent's conditions.
    func partitionCondition(tableAt index: Int, alias: String, scopeExpression: String) -> String? {
        guard partition != nil else { return nil }
        switch placement(ofTableAt: index) {
        case .shared: return "cardinality(\(scopeExpression)) = 0"
        case .column(let column): return "\(alias).\(SQLIdentifier.quote(column)) = ANY(\(scopeExpression))"
        case .parent: return nil
        }
    }

    /// The layout devices read (``PartitionLayout``), in SQLite column names; nil without `partition:`.
    public var partitionLayout: PartitionLayout? {
        guard let partition, let source = table(named: partition.table) else { return nil }
        let entries = tables.map { table in
            PartitionLayout.Table(
                name: table.name, partition: table.partition.map(table.sqliteColumn(of:)),
                parent: table.parent.map { .init(table: $0.table, column: table.sqliteColumn(of: $0.column)) })
        }
        return PartitionLayout(
            partition: .init(table: partition.table, key: source.sqliteColumn(of: partition.key)), tables: entries,
            access: partition.access == nil ? nil : true)
    }
}
