import CLibPQ
import FerryCore
import Foundation

/// A blocking libpq connection. Publishing reads with `COPY … TO STDOUT (FORMAT binary)`, which PostgresNIO
/// does not offer; everything else goes through ``query(_:_:)`` with bound parameters.
///
/// Not `Sendable`: one owner (a publish job) at a time. Errors never contain the password.
///
/// ```swift
/// let pg = try PostgresConnection(url: "postgres://postgres@127.0.0.1:5432/app")
/// let rows = try pg.query("SELECT name FROM trips WHERE id = $1", ["1"])
/// ```
public final class PostgresConnection {
    let handle: OpaquePointer
    /// The URL with its password replaced by `***`.
    public let redactedURL: String
    /// Statements prepared on this connection by ``runPrepared(_:_:)``: SQL text → statement name.
    var preparedStatements: [String: String] = [:]
    /// How many statements this connection has prepared (names them `ferry_1`, `ferry_2`, …).
    var preparedCount = 0

    public init(url: String) throws {
        redactedURL = redactURL(url)
        guard let conn = PQconnectdb(url) else {
            throw FerryError(.database, "cannot allocate a PostgreSQL connection", key: redactedURL)
        }
        guard PQstatus(conn) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(conn)).trimmingCharacters(in: .whitespacesAndNewlines)
            PQfinish(conn)
            throw FerryError(
                .database,
                "cannot connect to PostgreSQL at \(redactedURL): \(Self.scrub(message, url: url)); check the database URL (host, port, user, database) and that PostgreSQL is running"
            )
        }
        handle = conn
        PQsetClientEncoding(conn, "UTF8")
    }

    deinit { PQfinish(handle) }

    /// libpq messages may echo connection parameters; never let a password through.
    static func scrub(_ message: String, url: String) -> String {
        var out = message
        for secret in passwords(in: url) where !secret.isEmpty {
            out = out.replacingOccurrences(of: secret, with: "***")
        }
        return out
    }

    /// Every form the password may take in `url`: URI userinfo (raw and percent-decoded, even when the URL does
    /// not parse) and `password=` in key=value or query form.
    static func passwords(in url: String) -> [String] {
        var found: [String] = []
        if let components = URLComponents(string: url) {
            found += [components.password, components.percentEncodedPassword].compactMap { $0 }
        }
        if let scheme = url.range(of: "://") {
            let rest = url[scheme.upperBound...]
            if let at = rest.lastIndex(of: "@"), let colon = rest[..<at].firstIndex(of: ":") {
                let raw = String(rest[rest.index(after: colon)..<at])
                found.append(raw)
                if let decoded = raw.removingPercentEncoding { found.append(decoded) }
            }
        }
        var remaining = Substring(url)
        while let range = remaining.range(of: "password=") {
            remaining = remaining[range.upperBound...]
            let value = remaining.prefix { $0 != " " && $0 != "&" }
            found.append(String(value.trimmingCharacters(in: CharacterSet(charactersIn: "'"))))
            if let decoded = String(value).removingPercentEncoding { found.append(decoded) }
        }
        // Longest first, so a password containing another candidate is replaced whole.
        return found.filter { !$0.isEmpty }.sorted { $0.count > $1.count }
    }

    var errorMessage: String {
        String(cString: PQerrorMessage(handle)).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Runs SQL without parameters (may contain several statements).
    public func execute(_ sql: String) throws {
        guard let result = PQexec(handle, sql) else { throw FerryError(.database, "query failed: \(errorMessage)") }
        defer { PQclear(result) }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY else {
            throw FerryError(.database, Self.resultError(result, fallback: errorMessage))
        }
    }

    /// Runs one statement with text parameters (`$1`, `$2`, … ; nil is NULL) and returns rows as text.
    public func query(_ sql: String, _ parameters: [String?] = []) throws -> [[String?]] {
        let result = withCStrings(parameters) { pointers in
            PQexecParams(handle, sql, Int32(parameters.count), nil, pointers, nil, nil, 0)
        }
        guard let result else { throw FerryError(.database, "query failed: \(errorMessage)") }
        defer { PQclear(result) }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            throw FerryError(.database, Self.resultError(result, fallback: errorMessage))
        }
        return Self.textRows(of: result)
    }

    /// Every row of a result as text (nil for NULL).
    static func textRows(of result: OpaquePointer) -> [[String?]] {
        let rows = Int(PQntuples(result))
        let cols = Int(PQnfields(result))
        var out: [[String?]] = []
        out.reserveCapacity(rows)
        for r in 0..<rows {
            var row: [String?] = []
            row.reserveCapacity(cols)
            for c in 0..<cols {
                if PQgetisnull(result, Int32(r), Int32(c)) == 1 {
                    row.append(nil)
                } else {
                    row.append(String(cString: PQgetvalue(result, Int32(r), Int32(c))))
                }
            }
            out.append(row)
        }
        return out
    }

    static func resultError(_ result: OpaquePointer, fallback: String) -> String {
        let primary = PQresultErrorField(result, Int32(UInt8(ascii: "M"))).map { String(cString: $0) }
        let detail = PQresultErrorField(result, Int32(UInt8(ascii: "D"))).map { String(cString: $0) }
        let hint = PQresultErrorField(result, Int32(UInt8(ascii: "H"))).map { String(cString: $0) }
        var message = primary ?? fallback
        if let detail { message += " (\(detail))" }
        if let hint { message += "; hint: \(hint)" }
        return message
    }
}

/// Calls `body` with a C array of NUL-terminated strings (nil stays nil) that lives for the call.
func withCStrings<R>(_ strings: [String?], _ body: ([UnsafePointer<CChar>?]) throws -> R) rethrows -> R {
    let storage: [UnsafeMutablePointer<CChar>?] = strings.map { $0.map { strdup($0)! } }
    defer { for p in storage { free(p) } }
    return try body(storage.map { $0.map { UnsafePointer($0) } })
}
