import FerryCore
import Foundation

/// The result of one SQL statement run on the client database (`ferry exec`).
public struct StatementResult: Sendable, Equatable {
    /// Column names, empty for statements that return no rows.
    public var columns: [String]
    public var rows: [[SQLiteValue]]
    /// Rows changed by an INSERT, UPDATE or DELETE.
    public var changes: Int
}

/// Runs exactly one statement on the client database. Writes to writable tables are captured by the outbox
/// triggers in the same transaction; writes to read-only tables fail with the trigger's message.
///
/// ```swift
/// let result = try LocalStatement.run("UPDATE trips SET seats = 1 WHERE name = 'Växjö-Kalmar'", on: db)
/// ```
public enum LocalStatement {
    public static func run(_ sql: String, on db: SQLiteConnection) throws -> StatementResult {
        let trimmed = sql.trimmingCharacters(in: .whitespacesAndNewlines.union(CharacterSet(charactersIn: ";")))
        guard !trimmed.isEmpty else { throw FerryError(.badInput, "no SQL statement given") }
        let statement = try db.prepare(trimmed)
        guard !statement.hasTrailingSQL else {
            throw FerryError(.badInput, "give exactly one SQL statement; run the others one at a time")
        }
        let columns = (0..<statement.columnCount).map(statement.columnName)
        var rows: [[SQLiteValue]] = []
        do {
            while try statement.step() {
                rows.append((0..<statement.columnCount).map { statement.value(at: $0) })
            }
        } catch let error as FerryError {
            // Triggers raise "ferry: …" messages meant for the user; keep just that part.
            if let range = error.message.range(of: "ferry: ") {
                let text = error.message[range.upperBound...]
                let end = text.range(of: " in ")?.lowerBound ?? text.endIndex
                throw FerryError(.badInput, String(text[..<end]), path: db.path)
            }
            throw error
        }
        return StatementResult(columns: columns, rows: rows, changes: columns.isEmpty ? db.changes : 0)
    }
}
