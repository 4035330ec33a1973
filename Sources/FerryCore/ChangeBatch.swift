/// Wire types of `POST /v1/datasets/{dataset}/changes`: shared by the client's outbox and the server's merger.
///
/// ```json
/// {"clientId":"device-1","sentAt":"2026-11-21T10:00:00.000Z",
///  "changes":[{"id":"<uuid>","table":"trips","op":"update","key":{"id":"…"},
///              "values":{"name":"Växjö-Kalmar","seats":1},"editedAt":"…","baseUpdatedAt":"…",
///              "base":{"name":"Växjö","seats":2}}]}
/// ```
public struct ChangeBatch: Codable, Sendable, Equatable {
    public var clientId: String
    /// The device clock when the batch was sent, ISO-8601 UTC ms; the server derives the clock offset from it.
    public var sentAt: String
    public var changes: [Change]

    public init(clientId: String, sentAt: String, changes: [Change]) {
        self.clientId = clientId
        self.sentAt = sentAt
        self.changes = changes
    }
}

/// One edit made on a device.
public struct Change: Codable, Sendable, Equatable {
    public enum Operation: String, Codable, Sendable { case insert, update, delete }

    /// UUID made on the device: the idempotency key.
    public var id: String
    public var table: String
    public var op: Operation
    /// Primary key columns and values.
    public var key: [String: JSONValue]
    /// Changed columns and their new values (empty for deletes).
    public var values: [String: JSONValue]
    /// Device clock at the edit, ISO-8601 UTC ms.
    public var editedAt: String
    /// The row's `updated_at` as the device last saw it from the server; nil for inserts.
    public var baseUpdatedAt: String?
    /// Updates only: the value each changed column had on the device before the edit (its base), nil from a device
    /// that predates per-column merging (then the change is merged row by row). On a table merged per column
    /// (`merge: {per: column}`), a column is in conflict only when the server's value differs from its base; on an
    /// additive column (`add: [...]`) the server adds `value − base` to its current value. Absent from the JSON
    /// when nil.
    public var base: [String: JSONValue]?

    public init(
        id: String, table: String, op: Operation, key: [String: JSONValue], values: [String: JSONValue],
        editedAt: String,
        baseUpdatedAt: String?, base: [String: JSONValue]? = nil
    ) {
        self.id = id
        self.table = table
        self.op = op
        self.key = key
        self.values = values
        self.editedAt = editedAt
        self.baseUpdatedAt = baseUpdatedAt
        self.base = base
    }
}

/// The response: one result per change, in request order.
public struct ChangeResults: Codable, Sendable, Equatable {
    public var results: [ChangeResult]
    public init(results: [ChangeResult]) { self.results = results }
}

/// The server's decision on one change.
public struct ChangeResult: Codable, Sendable, Equatable {
    /// `merged`: a change merged per column of which some columns were written and others lost to the rule
    /// (``ChangeResult/lost`` names them); the device keeps it like a rejected edit.
    public enum Status: String, Codable, Sendable {
        case applied, rejected, gone, invalid, forbidden, merged
    }

    public var id: String
    public var status: Status
    /// The server's row after the decision (the winner); nil when the row does not exist.
    public var row: [String: JSONValue]?
    public var message: String?
    /// For `merged`: the changed columns whose values lost (sorted); nil otherwise, and then absent from the JSON.
    public var lost: [String]?

    public init(id: String, status: Status, row: [String: JSONValue]?, message: String?, lost: [String]? = nil) {
        self.id = id
        self.status = status
        self.row = row
        self.message = message
        self.lost = lost
    }

    // `row` is always present in the JSON, as null when there is no row.
    enum CodingKeys: String, CodingKey { case id, status, row, message, lost }
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(status, forKey: .status)
        try c.encode(row, forKey: .row)
        try c.encodeIfPresent(message, forKey: .message)
        try c.encodeIfPresent(lost, forKey: .lost)
    }
}

/// A count per answer status: the device's push summary and the server's note of a device's last push.
public protocol ChangeTally {
    var applied: Int { get set }
    var merged: Int { get set }
    var rejected: Int { get set }
    var gone: Int { get set }
    var invalid: Int { get set }
    var forbidden: Int { get set }
}

extension ChangeTally {
    /// Counts one answer.
    public mutating func count(_ status: ChangeResult.Status) {
        switch status {
        case .applied: applied += 1
        case .merged: merged += 1
        case .rejected: rejected += 1
        case .gone: gone += 1
        case .invalid: invalid += 1
        case .forbidden: forbidden += 1
        }
    }
}

/// A JSON value, for row values that travel between SQLite, JSON and PostgreSQL.
public enum JSONValue: Codable, Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        // Each `try?` asks "is it this JSON type?"; a value of no type is the error thrown below.
        if c.decodeNil() {
            self = .null
        } else if let b = try? c.decode(Bool.self) {  // not this type: the next is tried
            self = .bool(b)
        } else if let i = try? c.decode(Int64.self) {  // likewise
            self = .int(i)
        } else if let d = try? c.decode(Double.self) {  // likewise
            self = .double(d)
        } else if let s = try? c.decode(String.self) {  // likewise
            self = .string(s)
        } else {
            throw DecodingError.dataCorruptedError(
                in: c, debugDescription: "values must be null, a boolean, a number or a string")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .int(let i): try c.encode(i)
        case .double(let d): try c.encode(d)
        case .string(let s): try c.encode(s)
        }
    }
}
