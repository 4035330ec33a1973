/// A progress report while a table streams, for a terminal line (`campgrounds: 120000 rows, 85000 rows/s`).
///
/// ```swift
/// configuration.progress = { p in print("\(p.table): \(p.rows) rows (\(Int(p.rowsPerSecond)) rows/s)") }
/// ```
public struct PublishProgress: Sendable, Equatable {
    public var dataset: String
    /// SQLite table name.
    public var table: String
    /// Rows loaded so far.
    public var rows: Int
    /// Seconds since this table started.
    public var seconds: Double
    /// True once the table is complete.
    public var finished: Bool
    /// The scope value being exported, for a template with `scope:`; nil otherwise.
    public var scope: String?

    /// Rows per second so far (0 before the first second's worth of data).
    public var rowsPerSecond: Double { seconds > 0 ? Double(rows) / seconds : 0 }

    public init(dataset: String, table: String, rows: Int, seconds: Double, finished: Bool, scope: String? = nil) {
        self.scope = scope
        self.dataset = dataset
        self.table = table
        self.rows = rows
        self.seconds = seconds
        self.finished = finished
    }
}
