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
    func preparedName(for sql: String) throws(PostgresQueryError) -> String? {
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

    /// One statement of ``runPipeline(_:)``.
    package struct PipelinedStatement: Sendable {
        package var sql: String
        package var parameters: [String?]

        package init(_ sql: String, _ parameters: [String?] = []) {
            self.sql = sql
            self.parameters = parameters
        }
    }

    /// Sends `statements` at once (libpq's pipeline mode, each prepared as by ``runPrepared(_:_:)``) and waits for
    /// their answers together: one round trip where running them one by one costs one each. They run in order; the
    /// first that fails throws, and the ones after it do not run (inside a transaction, which then must roll back).
    ///
    /// ```swift
    /// let answers = try pg.runPipeline([.init("BEGIN"), .init("SELECT pg_advisory_xact_lock($1::int8)", ["7"])])
    /// ```
    package func runPipeline(_ statements: [PipelinedStatement]) throws(PostgresQueryError) -> [[[String?]]] {
        // Preparing is a round trip of its own, once per connection and statement, before the pipeline starts.
        var names: [String?] = []
        for statement in statements { names.append(try preparedName(for: statement.sql)) }
        guard PQenterPipelineMode(handle) == 1 else {
            throw PostgresQueryError(sqlState: "", message: "cannot enter pipeline mode: \(errorMessage)")
        }
        defer { PQexitPipelineMode(handle) }
        for (k, statement) in statements.enumerated() {
            let sent = withCStrings(statement.parameters) { pointers in
                if let name = names[k] {
                    return PQsendQueryPrepared(handle, name, Int32(pointers.count), pointers, nil, nil, 0)
                }
                return PQsendQueryParams(handle, statement.sql, Int32(pointers.count), nil, pointers, nil, nil, 0)
            }
            guard sent == 1 else { throw PostgresQueryError(sqlState: "", message: "query failed: \(errorMessage)") }
        }
        guard PQpipelineSync(handle) == 1 else {
            throw PostgresQueryError(sqlState: "", message: "query failed: \(errorMessage)")
        }
        var answers: [[[String?]]] = []
        var failure: PostgresQueryError?
        // Each statement's result is followed by a nil; the pipeline's sync result comes last.
        while true {
            guard let result = PQgetResult(handle) else {
                guard PQstatus(handle) == CONNECTION_OK else {
                    throw PostgresQueryError(sqlState: "", message: "query failed: \(errorMessage)")
                }
                continue
            }
            defer { PQclear(result) }
            let status = PQresultStatus(result)
            if status == PGRES_PIPELINE_SYNC { break }
            if status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK {
                answers.append(Self.textRows(of: result))
            } else if status != PGRES_PIPELINE_ABORTED, failure == nil {
                let error = queryError(result)
                if error.sqlState == "26000" || error.sqlState == "0A000" {
                    preparedStatements[statements[answers.count].sql] = nil
                }
                failure = error
            }
        }
        if let failure { throw failure }
        return answers
    }
}
