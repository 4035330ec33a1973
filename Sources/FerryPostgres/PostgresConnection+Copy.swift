import CLibPQ
import FerryCore

extension PostgresConnection {
    /// Column names and type OIDs a query would return, without running it (PQprepare + PQdescribePrepared).
    package func describe(_ sql: String) throws -> [(name: String, oid: UInt32)] {
        guard let prepared = PQprepare(handle, "", sql, 0, nil) else {
            throw FerryError(.database, "cannot prepare query: \(errorMessage)")
        }
        defer { PQclear(prepared) }
        guard PQresultStatus(prepared) == PGRES_COMMAND_OK else {
            throw FerryError(.database, Self.resultError(prepared, fallback: errorMessage))
        }
        guard let described = PQdescribePrepared(handle, "") else {
            throw FerryError(.database, "cannot describe query: \(errorMessage)")
        }
        defer { PQclear(described) }
        guard PQresultStatus(described) == PGRES_COMMAND_OK else {
            throw FerryError(.database, Self.resultError(described, fallback: errorMessage))
        }
        return (0..<PQnfields(described)).map { i in
            (String(cString: PQfname(described, i)), UInt32(PQftype(described, i)))
        }
    }

    /// Runs `COPY … TO STDOUT` and hands each CopyData message to `body` (valid only during the call).
    /// Returns the row count PostgreSQL reports in its `COPY n` command tag. Memory stays flat: libpq holds
    /// one message at a time.
    package func copyOut(_ sql: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> Int {
        guard let started = PQexec(handle, sql) else { throw FerryError(.database, "COPY failed: \(errorMessage)") }
        let status = PQresultStatus(started)
        guard status == PGRES_COPY_OUT else {
            defer { PQclear(started) }
            throw FerryError(.database, Self.resultError(started, fallback: errorMessage))
        }
        PQclear(started)
        var failure: (any Error)?
        while true {
            var buffer: UnsafeMutablePointer<CChar>?
            let length = PQgetCopyData(handle, &buffer, 0)
            if length > 0, let buffer {
                if failure == nil {
                    do { try body(UnsafeRawBufferPointer(start: buffer, count: Int(length))) } catch { failure = error }
                }
                PQfreemem(buffer)
                // After a failure keep draining: the connection must reach the end of the COPY to be usable.
                continue
            }
            if length == -2 { throw FerryError(.database, "COPY failed: \(errorMessage)") }
            break  // -1: the COPY is done
        }
        var rows = -1
        var finalError: String?
        while let result = PQgetResult(handle) {
            if PQresultStatus(result) == PGRES_COMMAND_OK {
                rows = Int(String(cString: PQcmdTuples(result))) ?? -1
            } else {
                finalError = Self.resultError(result, fallback: errorMessage)
            }
            PQclear(result)
        }
        if let failure { throw failure }
        if let finalError { throw FerryError(.database, finalError) }
        return rows
    }
}
