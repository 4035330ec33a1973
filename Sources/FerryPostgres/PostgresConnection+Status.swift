import CLibPQ
import FerryCore

/// A failed statement with PostgreSQL's SQLSTATE, so callers can tell a deadlock (`40P01`) or a unique
/// violation (`23505`) from a bad value (`22P02`) and retry or report accordingly.
///
/// ```swift
/// do { _ = try pg.run("SELECT $1::int", ["x"]) }
/// catch let error as PostgresQueryError where error.sqlState == "22P02" { print(error.message) }
/// ```
public struct PostgresQueryError: Error, Sendable, CustomStringConvertible {
    /// Five-character SQLSTATE, or "" when the failure happened on the client side (e.g. a lost connection).
    public let sqlState: String
    /// PostgreSQL's message with detail and hint; never contains the password.
    public let message: String

    public init(sqlState: String, message: String) {
        self.sqlState = sqlState
        self.message = message
    }

    public var description: String { sqlState.isEmpty ? message : "\(message) [SQLSTATE \(sqlState)]" }

    /// True for failures that a retry of the same transaction may not hit again.
    public var isTransient: Bool {
        sqlState == "40P01" || sqlState == "40001" || sqlState == "23505"
    }
}

extension PostgresConnection {
    /// Whether the connection is still usable (false after the server went away).
    ///
    /// ```swift
    /// if !pg.isConnected { pg = try PostgresConnection(url: url) }
    /// ```
    public var isConnected: Bool { PQstatus(handle) == CONNECTION_OK }

    /// Like ``query(_:_:)`` but throws ``PostgresQueryError`` carrying the SQLSTATE.
    ///
    /// ```swift
    /// let rows = try pg.run("SELECT id FROM trips WHERE id = ANY($1::int[])", ["{1,2}"])
    /// ```
    public func run(_ sql: String, _ parameters: [String?] = []) throws(PostgresQueryError) -> [[String?]] {
        let result = withCStrings(parameters) { pointers in
            PQexecParams(handle, sql, Int32(parameters.count), nil, pointers, nil, nil, 0)
        }
        guard let result else { throw PostgresQueryError(sqlState: "", message: "query failed: \(errorMessage)") }
        defer { PQclear(result) }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else { throw queryError(result) }
        return Self.textRows(of: result)
    }

    /// The error of a failed result, with its SQLSTATE.
    func queryError(_ result: OpaquePointer) -> PostgresQueryError {
        let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) } ?? ""
        return PostgresQueryError(sqlState: state, message: Self.resultError(result, fallback: errorMessage))
    }
}
