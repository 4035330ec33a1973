/// How a partitioned dataset's tables place their rows (docs/partitions.md): the wire shape of
/// `GET /v1/datasets/{dataset}/partitions` (with ``PartitionList``) and of the stored manifest's `partitioning`.
/// Column names are SQLite names, the ones a device reads and writes.
///
/// ```json
/// {"partition":{"table":"projects","key":"id"},
///  "tables":[{"name":"projects","partition":"id"},{"name":"sites","partition":"project_id"},
///            {"name":"findings","parent":{"table":"sites","column":"site_id"}},{"name":"checklist_items"}]}
/// ```
public struct PartitionLayout: Codable, Sendable, Equatable {
    /// The table whose rows are the partitions, and its key column.
    public struct Source: Codable, Sendable, Equatable {
        public var table: String
        public var key: String

        public init(table: String, key: String) {
            self.table = table
            self.key = key
        }
    }

    /// One table: in a partition through a column (``partition``), through its parent row (``parent``), or shared
    /// (neither).
    public struct Table: Codable, Sendable, Equatable {
        public var name: String
        /// The column holding the row's partition key.
        public var partition: String?
        /// The parent table and this table's column holding the parent's key.
        public var parent: Parent?

        /// A child table's link to its parent row.
        public struct Parent: Codable, Sendable, Equatable {
            public var table: String
            public var column: String

            public init(table: String, column: String) {
                self.table = table
                self.column = column
            }
        }

        public init(name: String, partition: String? = nil, parent: Parent? = nil) {
            self.name = name
            self.partition = partition
            self.parent = parent
        }

        /// True when every device carries the table whole.
        public var isShared: Bool { partition == nil && parent == nil }
    }

    public var partition: Source
    public var tables: [Table]
    /// True when a bearer token is needed and decides which partitions it may read (the template's
    /// `partition.access`); nil: the dataset is public.
    public var access: Bool?

    public init(partition: Source, tables: [Table], access: Bool? = nil) {
        self.partition = partition
        self.tables = tables
        self.access = access
    }

    /// The scope value of the shared stream in the store (a partition's is its key, which is never empty).
    public static let sharedStream = ""

    /// The longest partition key, in UTF-8 bytes: a key is a URL path segment and a file name on devices.
    public static let maxKeyBytes = 200

    /// Whether `key` can name a partition: non-empty, at most ``maxKeyBytes``, no control characters.
    public static func isValidKey(_ key: String) -> Bool {
        !key.isEmpty && key.utf8.count <= maxKeyBytes
            && !key.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }
}

/// `GET /v1/datasets/{dataset}/partitions`: the layout, the shared stream's version and the partitions the caller
/// may read, sorted by key.
public struct PartitionList: Codable, Sendable, Equatable {
    /// One partition (or the shared stream) and its current version.
    public struct Stream: Codable, Sendable, Equatable {
        /// The partition key; nil for the shared stream.
        public var key: String?
        public var version: Int

        public init(key: String?, version: Int) {
            self.key = key
            self.version = version
        }
    }

    public var dataset: String
    public var partition: PartitionLayout.Source
    public var tables: [PartitionLayout.Table]
    /// True when a bearer token is needed (see ``PartitionLayout/access``).
    public var access: Bool?
    public var shared: Stream?
    public var partitions: [Stream]

    public init(dataset: String, layout: PartitionLayout, shared: Stream?, partitions: [Stream]) {
        self.dataset = dataset
        self.partition = layout.partition
        self.tables = layout.tables
        self.access = layout.access
        self.shared = shared
        self.partitions = partitions
    }

    /// The layout the listing carries.
    public var layout: PartitionLayout { PartitionLayout(partition: partition, tables: tables, access: access) }
}
