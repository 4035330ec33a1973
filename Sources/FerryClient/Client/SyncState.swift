import Foundation
import FerryCore

/// The three sync states of a client directory, as in the book.
///
/// ```swift
/// switch try await client.status().state {
/// case .initialSyncRequired: print("no data yet")
/// case .upToDate: print("nothing waiting")
/// case .updatePending: try await client.applyPendingUpdate()
/// }
/// ```
public enum SyncState: String, Sendable, Codable, CaseIterable {
    /// There is no `database.db` (and no `updated.db`): the first fetch goes straight to `database.db`.
    case initialSyncRequired
    /// `database.db` exists and no verified update waits.
    case upToDate
    /// A verified `updated.db` waits to be applied (on launch or on request).
    case updatePending

    /// Derives the state from which files exist. Pure: the files are the truth, nothing else is stored.
    static func derive(hasDatabase: Bool, hasUpdate: Bool) -> SyncState {
        if hasUpdate { return .updatePending }
        return hasDatabase ? .upToDate : .initialSyncRequired
    }
}

/// What a client directory holds: the state plus the live and pending versions and checksums.
///
/// ```swift
/// let status = try FerryClient.status(directory: URL(fileURLWithPath: "/data/ferry"))
/// print(status.state, status.version ?? 0, status.pendingVersion ?? 0)
/// ```
public struct ClientStatus: Sendable, Equatable {
    public var state: SyncState
    /// Version of `database.db` (from its `ferry_snapshot` row), nil when there is none.
    public var version: Int?
    /// SHA-256 hex of `database.db` as it was published, nil when there is none.
    public var sha256: String?
    /// Version of the waiting `updated.db`, nil when nothing is pending.
    public var pendingVersion: Int?
    /// SHA-256 hex of the waiting `updated.db`, nil when nothing is pending.
    public var pendingSha256: String?
    /// Version of `previous.db` (what ``FerryClient/rollback()`` restores), nil when there is none.
    public var previousVersion: Int?
    /// Local edits waiting for the server's answer (the outbox).
    public var outbox: Int

    public init(
        state: SyncState, version: Int? = nil, sha256: String? = nil, pendingVersion: Int? = nil,
        pendingSha256: String? = nil, previousVersion: Int? = nil, outbox: Int = 0
    ) {
        self.outbox = outbox
        self.state = state
        self.version = version
        self.sha256 = sha256
        self.pendingVersion = pendingVersion
        self.pendingSha256 = pendingSha256
        self.previousVersion = previousVersion
    }

    /// The `ferry status --json` object: exactly these keys in this order, `null` when absent.
    ///
    /// ```json
    /// {"state":"updatePending","version":3,"sha256":"…","pendingVersion":4,"pendingSha256":"…","outbox":0}
    /// ```
    public var jsonFields: [(String, JSONScalar)] {
        [
            ("state", .string(state.rawValue)),
            ("version", .int(version)),
            ("sha256", .string(sha256)),
            ("pendingVersion", .int(pendingVersion)),
            ("pendingSha256", .string(pendingSha256)),
            ("outbox", .int(outbox)),
        ]
    }

    /// ``jsonFields`` plus `extra` (CLI `--json` output only ever adds fields), as one line of JSON.
    public func json(adding extra: [(String, JSONScalar)] = []) -> String {
        JSONScalar.object(jsonFields + extra)
    }

    /// A short human-readable summary, one fact per line.
    public var text: String {
        var lines = ["state: \(state.rawValue)"]
        lines.append("version: " + (version.map { "\($0)" } ?? "none") + (sha256.map { " (sha256 \($0))" } ?? ""))
        lines.append(
            "pending: " + (pendingVersion.map { "version \($0)" } ?? (pendingSha256 == nil ? "none" : "unknown version"))
                + (pendingSha256.map { " (sha256 \($0))" } ?? ""))
        lines.append("outbox: \(outbox) local edit\(outbox == 1 ? "" : "s") waiting for upload")
        if let previousVersion { lines.append("previous: version \(previousVersion) (ferry rollback restores it)") }
        return lines.joined(separator: "\n")
    }
}

/// A JSON scalar for the CLI's ordered, single-line JSON objects (`null` when the optional is nil).
///
/// ```swift
/// JSONScalar.object([("a", .int(1)), ("b", .string(nil))])  // {"a":1,"b":null}
/// ```
public enum JSONScalar: Sendable, Equatable {
    case string(String?)
    case int(Int?)
    case bool(Bool)

    var encoded: String {
        switch self {
        case .string(nil), .int(nil): return "null"
        case .string(let s?): return Self.quote(s)
        case .int(let i?): return String(i)
        case .bool(let b): return b ? "true" : "false"
        }
    }

    /// Encodes `fields` as a JSON object, keeping their order.
    public static func object(_ fields: [(String, JSONScalar)]) -> String {
        "{" + fields.map { "\(quote($0.0)):\($0.1.encoded)" }.joined(separator: ",") + "}"
    }

    static func quote(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case let c where c.value < 0x20: out += String(format: "\\u%04x", c.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
