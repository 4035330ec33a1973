import Foundation

/// A row named as `TABLE:KEY` (a composite key as `TABLE:K1,K2`, in the primary key's column order): what
/// `ferry explain --row` and `GET /v1/datasets/{dataset}/explain?row=` take.
///
/// ```swift
/// let row = try RowReference(parsing: "trips:42")   // table "trips", key ["42"]
/// ```
public struct RowReference: Sendable, Equatable {
    public var table: String
    public var key: [String]

    public init(table: String, key: [String]) {
        self.table = table
        self.key = key
    }

    /// Parses `TABLE:KEY`; a missing colon, an empty table or an empty key part is a `.badInput` naming the form.
    public init(parsing text: String) throws {
        let bad = FerryError(
            .badInput,
            "'\(text.prefix(200))' is not a row: write TABLE:KEY (a composite key as TABLE:K1,K2, in the primary key's order)",
            key: "row")
        guard let colon = text.firstIndex(of: ":") else { throw bad }
        let table = String(text[..<colon])
        let key = text[text.index(after: colon)...].split(separator: ",", omittingEmptySubsequences: false).map(
            String.init)
        guard !table.isEmpty, table.utf8.count <= 128, !key.isEmpty, key.allSatisfy({ !$0.isEmpty }) else { throw bad }
        self.init(table: table, key: key)
    }

    /// `TABLE:K1,K2`.
    public var text: String { "\(table):\(key.joined(separator: ","))" }
}

/// Why a device shows or lacks a row: the answer of `GET /v1/datasets/{dataset}/explain` and of
/// `ferry explain --json`. Its keys are fixed (docs/http-api.md): `device`, `deviceVersion` (null when the device
/// never synced), `currentVersion`, `row` {`present`, `inScope`, `rule`, `lastChangedIn`}, `changes` (oldest first,
/// each with `status` and `lost`), `verdict` {`code`, `text`}.
public struct RowExplanation: Codable, Sendable, Equatable {
    /// What decides the row on the server.
    public struct Row: Codable, Sendable, Equatable {
        /// Whether the row is in PostgreSQL now.
        public var present: Bool
        /// Whether the template exports it to the device (its scope, filter and parent chain).
        public var inScope: Bool
        /// The rule that leaves it out, when not in scope.
        public var rule: String?
        /// The published version it last changed in (or was deleted in); nil when not known or not yet published.
        public var lastChangedIn: Int?
        /// Its `updated_at` (or, deleted, the tombstone's time), UTC.
        public var changedAt: String?
        /// For a partitioned dataset (docs/partitions.md): the partition key the row belongs to; nil for a row of a
        /// shared table, and absent from the JSON for other datasets.
        public var partition: String?

        public init(present: Bool, inScope: Bool, rule: String?, lastChangedIn: Int?, changedAt: String?) {
            self.present = present
            self.inScope = inScope
            self.rule = rule
            self.lastChangedIn = lastChangedIn
            self.changedAt = changedAt
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(present, forKey: .present)
            try c.encode(inScope, forKey: .inScope)
            try c.encode(rule, forKey: .rule)
            try c.encode(lastChangedIn, forKey: .lastChangedIn)
            try c.encode(changedAt, forKey: .changedAt)
            try c.encodeIfPresent(partition, forKey: .partition)
        }
    }

    /// One change the device uploaded for the row, with the server's answer.
    public struct Change: Codable, Sendable, Equatable {
        public var id: String
        /// `applied`, `merged`, `rejected`, `gone`, `invalid` or `forbidden`.
        public var status: String
        /// For `merged`: the columns whose values lost; otherwise nil.
        public var lost: [String]?
        public var message: String?
        /// When the server processed it, UTC.
        public var at: String

        public init(id: String, status: String, lost: [String]?, message: String?, at: String) {
            self.id = id
            self.status = status
            self.lost = lost
            self.message = message
            self.at = at
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(id, forKey: .id)
            try c.encode(status, forKey: .status)
            try c.encode(lost, forKey: .lost)
            try c.encodeIfPresent(message, forKey: .message)
            try c.encode(at, forKey: .at)
        }
    }

    /// The one-line answer.
    public struct Verdict: Codable, Sendable, Equatable {
        /// `present`, `will-arrive`, `out-of-scope`, `deleted`, `edit-rejected`, `edit-merged` or `never-synced`.
        public var code: String
        public var text: String

        public init(code: String, text: String) {
            self.code = code
            self.text = text
        }
    }

    public var dataset: String
    public var device: String
    /// The version the device holds (last downloaded, by patch or in full); nil when it never synced.
    public var deviceVersion: Int?
    /// The version the device's scope is at now.
    public var currentVersion: Int
    /// The device's scope, on a scoped dataset.
    public var scope: String?
    public var table: String
    public var key: [String]
    public var row: Row
    public var changes: [Change]
    public var verdict: Verdict

    public init(
        dataset: String, device: String, deviceVersion: Int?, currentVersion: Int, scope: String?, table: String,
        key: [String], row: Row, changes: [Change], verdict: Verdict
    ) {
        self.dataset = dataset
        self.device = device
        self.deviceVersion = deviceVersion
        self.currentVersion = currentVersion
        self.scope = scope
        self.table = table
        self.key = key
        self.row = row
        self.changes = changes
        self.verdict = verdict
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(dataset, forKey: .dataset)
        try c.encode(device, forKey: .device)
        try c.encode(deviceVersion, forKey: .deviceVersion)
        try c.encode(currentVersion, forKey: .currentVersion)
        try c.encode(scope, forKey: .scope)
        try c.encode(table, forKey: .table)
        try c.encode(key, forKey: .key)
        try c.encode(row, forKey: .row)
        try c.encode(changes, forKey: .changes)
        try c.encode(verdict, forKey: .verdict)
    }
}
