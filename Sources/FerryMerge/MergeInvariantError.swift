/// The merge engine found PostgreSQL's answer inconsistent with what it just asked for (a write that returned no
/// row, fewer deleted rows than changes). Not a refusal of the change: the transaction is rolled back, nothing is
/// recorded for the change, and the request fails (503) so the device keeps the edit and sends it again.
///
/// ```swift
/// guard rows.count == expected else { throw MergeInvariantError(table: "trips", "wrote 2 rows, expected 3") }
/// ```
public struct MergeInvariantError: Error, CustomStringConvertible {
    /// The SQLite table name the write was for.
    public let table: String
    public let message: String

    public init(table: String, _ message: String) {
        self.table = table
        self.message = message
    }

    public var description: String {
        "merge engine invariant failed for table '\(table)': \(message); nothing was written, and the device will retry"
    }
}
