import CLibPQ

extension PostgresConnection {
    /// Most statements one connection keeps prepared; SQL beyond that runs unprepared (``run(_:_:)``).
    static let maxPreparedStatements = 256

    /// Like ``run(_:_:)``, but the statement is parsed and planned once per connection (a named prepared statement,
    /// found again by its SQL text) and only bound and executed after that. For SQL that a connection runs again
    /// and again with different parameters; a new connection (after a reconnect) prepares it afresh.
    ///
    /// A statement PostgreSQL no longer holds, or whose result no longer fits the table (a column added: SQLSTATE
    /// `0A000`), fails this once and is prepared again on the next call.
    ///
    /// ```swift
    /// for id in ["1", "2"] { _ = try pg.runPrepared("SELECT name FROM trips WHERE id = $1::int", [id]) }
    /// ```
    package func runPrepared(_ sql: String, _ parameters: [String?] = []) throws(PostgresQueryError) -> [[String?]] {
        guard let name = try preparedName(for: sql) else { return try run(sql, parameters) }
        let result = withCStrings(parameters) { pointers in
            PQexecPrepared(handle, name, Int32(parameters.count), pointers, nil, nil, 0)
        }
        guard let result else { throw PostgresQueryError(sqlState: "", message: "query failed: \(errorMessage)") }
        defer { PQclear(result) }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            let error = queryError(result)
            // 26000: no such prepared statement; 0A000: "cached plan must not change result type".
            if error.sqlState == "26000" || error.sqlState == "0A000" { preparedStatements[sql] = nil }
            throw error
        }
        return Self.textRows(of: result)
    }

    /// The name `sql` is prepared under on this connection, preparing it now if needed; nil when the connection
    /// already holds ``maxPreparedStatements``.
    private func preparedName(for sql: String) throws(PostgresQueryError) -> String? {
        if let name = preparedStatements[sql] { return name }
        guard preparedStatements.count < Self.maxPreparedStatements else { return nil }
        preparedCount += 1
        let name = "ferry_\(preparedCount)"
        guard let result = PQprepare(handle, name, sql, 0, nil) else {
            throw PostgresQueryError(sqlState: "", message: "cannot prepare query: \(errorMessage)")
        }
        defer { PQclear(result) }
        guard PQresultStatus(result) == PGRES_COMMAND_OK else { throw queryError(result) }
        preparedStatements[sql] = name
        return name
    }
}
