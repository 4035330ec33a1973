import Foundation

/// An error from any part of Ferry: a code to branch on, a message that says what went wrong and how to fix it,
/// and the context it happened in.
///
/// ```swift
/// throw FerryError(.badTemplate, "unknown key 'tabels'; did you mean 'tables'?", path: "templates/x.yml", key: "tabels")
/// ```
///
/// `description` never contains secrets: database URLs are redacted with ``redactURL(_:)`` before they get here.
public struct FerryError: Error, CustomStringConvertible, Sendable {
    /// What kind of failure this is. Stable: tools and tests match on it.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(_ rawValue: String) {
            self.rawValue = rawValue
        }
        public var description: String { rawValue }

        /// A template file is malformed or names something that does not exist.
        public static let badTemplate = Code("bad-template")
        /// The command line or a request carried a bad value.
        public static let badInput = Code("bad-input")
        /// PostgreSQL could not be reached, refused the login, or failed a query.
        public static let database = Code("database")
        /// SQLite failed.
        public static let sqlite = Code("sqlite")
        /// A file or directory operation failed (disk full, permission, missing file).
        public static let io = Code("io")
        /// The snapshot store is inconsistent or locked by another publisher.
        public static let store = Code("store")
        /// Something was not found (dataset, version, file).
        public static let notFound = Code("not-found")
        /// A file's checksum, size or format does not match what was promised.
        public static let verification = Code("verification")
        /// The server could not be reached or answered unexpectedly.
        public static let network = Code("network")
        /// The snapshot's schema version is not one the app accepts.
        public static let schemaVersion = Code("schema-version")
        /// The server refused the access token (HTTP 401, or 403 when the token does not grant the dataset): sign in
        /// again and retry. Nothing local is lost: the data and the queued edits are kept.
        public static let unauthorized = Code("unauthorized")
        /// The server retired every schema line this app build accepts (HTTP 410 on a dataset's manifest, versions,
        /// patches or objects): update the app. Nothing local is lost: the data, a pending update, a partial download
        /// and the queued edits are kept.
        public static let schemaRetired = Code("schema-retired")
    }

    public var code: Code
    public var message: String
    /// The file involved, if any.
    public var path: String?
    /// The template key, table or field involved, if any.
    public var key: String?
    /// The underlying error, if any.
    public var underlying: (any Error & Sendable)?

    public init(
        _ code: Code, _ message: String, path: String? = nil, key: String? = nil,
        underlying: (any Error & Sendable)? = nil
    ) {
        self.code = code
        self.message = message
        self.path = path
        self.key = key
        self.underlying = underlying
    }

    public var description: String {
        var out = ""
        if let path { out += "\(path): " }
        if let key { out += "\(key): " }
        out += message
        if let underlying { out += " (\(underlying))" }
        return out
    }
}

/// Removes the password from a `postgres://user:password@host/db` style URL so it can be logged or shown.
///
/// ```swift
/// redactURL("postgres://ferry:secret@db/app") // "postgres://ferry:***@db/app"
/// ```
public func redactURL(_ url: String) -> String {
    guard let schemeEnd = url.range(of: "://") else { return redactPasswordParameter(url) }
    let rest = url[schemeEnd.upperBound...]
    guard let at = rest.lastIndex(of: "@") else {
        return redactPasswordParameter(url)
    }
    let userinfo = rest[rest.startIndex..<at]
    guard let colon = userinfo.firstIndex(of: ":") else { return redactPasswordParameter(url) }
    return redactPasswordParameter(String(url[url.startIndex..<colon]) + ":***" + String(url[at...]))
}

private func redactPasswordParameter(_ url: String) -> String {
    // libpq also accepts `?password=...` and key=value strings `password=...`.
    var out = ""
    var remaining = Substring(url)
    while let range = remaining.range(of: "password=") {
        out += remaining[remaining.startIndex..<range.upperBound]
        out += "***"
        remaining = remaining[range.upperBound...]
        if let end = remaining.firstIndex(where: { $0 == "&" || $0 == " " }) {
            remaining = remaining[end...]
        } else {
            remaining = ""
        }
    }
    return out + remaining
}
