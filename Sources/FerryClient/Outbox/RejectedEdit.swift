import FerryCore
import Foundation

/// A local edit the server did not take, in whole or in part: answered `rejected` (its merge rule kept the
/// server's row, say a newer office write), `merged` (a table merged per column wrote some of its columns and kept
/// the server's values in ``lostColumns``) or `gone` (the row no longer exists on the server). The device's data
/// already shows the server's outcome; this record keeps what the user wrote and the server's row it lost to
/// (``serverValues``), so the app can tell them and let them resolve it: ``FerryClient/resubmit(_:values:)`` sends
/// a new edit on top of the server's row, ``FerryClient/discard(_:)`` keeps the server's row. It stays in the
/// database (`ferry_rejected`), across restarts and updates, until the app resolves or acknowledges it.
///
/// ```swift
/// for edit in try await client.rejectedEdits() {
///     print("\(edit.table) \(edit.key): your \(edit.lostColumns) lost to \(edit.serverValues ?? [:])")
/// }
/// try await client.acknowledgeRejectedEdits(edits)
/// ```
public struct RejectedEdit: Sendable, Equatable, Hashable, Codable, Identifiable {
    /// What the server answered.
    public enum Outcome: String, Sendable, Codable {
        /// The merge rule kept the server's row.
        case rejected
        /// The row was deleted on the server.
        case gone
        /// Merged per column: some columns were written, the ``RejectedEdit/lostColumns`` kept the server's values.
        case merged
    }

    /// The change id (a UUID made on the device).
    public var id: String
    /// The table edited.
    public var table: String
    /// The operation the device made.
    public var operation: Change.Operation
    /// The row's primary key.
    public var key: [String: JSONValue]
    /// The local values that lost (empty for a delete).
    public var values: [String: JSONValue]
    /// Rejected or gone.
    public var outcome: Outcome
    /// The table's merge rule when the server answered.
    public var rule: MergeRule
    /// The server's reason, when it gave one.
    public var reason: String?
    /// The device clock at the edit, ISO-8601 UTC ms.
    public var editedAt: String
    /// When the device recorded the answer, ISO-8601 UTC ms.
    public var answeredAt: String
    /// The server's row as it was when the edit lost (for `merged`: after the columns that won were written); nil
    /// when the row is gone, or the edit was kept by a client that predates per-column merging.
    public var serverValues: [String: JSONValue]?
    /// The columns whose local values lost, sorted: for `merged` those the server kept, otherwise every column of
    /// ``values``.
    public var lostColumns: [String]

    public init(
        id: String, table: String, operation: Change.Operation, key: [String: JSONValue],
        values: [String: JSONValue], outcome: Outcome, rule: MergeRule, reason: String?, editedAt: String,
        answeredAt: String, serverValues: [String: JSONValue]? = nil, lostColumns: [String]? = nil
    ) {
        self.id = id
        self.table = table
        self.operation = operation
        self.key = key
        self.values = values
        self.outcome = outcome
        self.rule = rule
        self.reason = reason
        self.editedAt = editedAt
        self.answeredAt = answeredAt
        self.serverValues = serverValues
        self.lostColumns = lostColumns ?? values.keys.sorted()
    }

    /// Records the server's answer for `change` (inside the transaction that writes the answer).
    static func keep(_ change: Change, result: ChangeResult, rule: MergeRule, in db: SQLiteConnection) throws {
        let outcome: Outcome =
            switch result.status {
            case .gone: .gone
            case .merged: .merged
            default: .rejected
            }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        func json<T: Encodable>(_ value: T) throws -> SQLiteValue {
            .text(String(decoding: try encoder.encode(value), as: UTF8.self))
        }
        let lost = result.lost ?? change.values.keys.sorted()
        try db.run(
            """
            INSERT OR REPLACE INTO ferry_rejected(id, tbl, op, key, vals, status, rule, reason, editedAt, answeredAt,
              serverVals, lost)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, \(OutboxSchema.nowSQL), ?, ?)
            """,
            [
                .text(change.id), .text(change.table), .text(change.op.rawValue), try json(change.key),
                try json(change.values), .text(outcome.rawValue),
                .text(rule.rawValue), result.message.map { .text($0) } ?? .null, .text(change.editedAt),
                try result.row.map(json) ?? .null, try json(lost),
            ])
    }

    /// Every rejected edit not yet acknowledged, oldest answer first. Empty for a database without the table.
    ///
    /// ```swift
    /// let edits = try RejectedEdit.all(in: db)
    /// ```
    public static func all(in db: SQLiteConnection) throws -> [RejectedEdit] {
        let hasTable =
            try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ferry_rejected'")?
            .integer == 1
        guard hasTable else { return [] }
        let decoder = JSONDecoder()
        let later = try ["serverVals", "lost"].map {
            try OutboxSchema.hasColumn(db, "ferry_rejected", $0) ? $0 : "NULL"
        }
        return try db.query(
            "SELECT id, tbl, op, key, vals, status, rule, reason, editedAt, answeredAt, \(later.joined(separator: ", ")) FROM ferry_rejected ORDER BY answeredAt, id"
        )
        .map { row in
            guard let id = row[0].text, let table = row[1].text,
                let op = row[2].text.flatMap(Change.Operation.init(rawValue:)),
                let key = row[3].text, let values = row[4].text,
                let outcome = row[5].text.flatMap(Outcome.init(rawValue:)),
                let rule = row[6].text.flatMap(MergeRule.init(rawValue:)), let editedAt = row[8].text,
                let answeredAt = row[9].text
            else {
                throw FerryError(
                    .sqlite, "a row of ferry_rejected is malformed; it was not written by Ferry", path: db.path)
            }
            return RejectedEdit(
                id: id, table: table, operation: op,
                key: try decoder.decode([String: JSONValue].self, from: Data(key.utf8)),
                values: try decoder.decode([String: JSONValue].self, from: Data(values.utf8)), outcome: outcome,
                rule: rule,
                reason: row[7].text, editedAt: editedAt, answeredAt: answeredAt,
                serverValues: try row[10].text.map {
                    try decoder.decode([String: JSONValue].self, from: Data($0.utf8))
                },
                lostColumns: try row[11].text.map { try decoder.decode([String].self, from: Data($0.utf8)) })
        }
    }

    /// Forgets the given edits (the app showed them). Returns how many were removed.
    ///
    /// ```swift
    /// try RejectedEdit.acknowledge(edits.map(\.id), in: db)
    /// ```
    @discardableResult
    public static func acknowledge(_ ids: [String], in db: SQLiteConnection) throws -> Int {
        let hasTable =
            try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ferry_rejected'")?
            .integer == 1
        guard hasTable else { return 0 }
        return try db.transaction {
            var removed = 0
            for id in ids {
                removed += try db.run("DELETE FROM ferry_rejected WHERE id = ?", [.text(id)])
            }
            return removed
        }
    }
}

extension FerryClient {
    /// The local edits the server answered `rejected`, `merged` or `gone`, not yet acknowledged (see ``RejectedEdit``).
    ///
    /// ```swift
    /// let undone = try await client.rejectedEdits()
    /// ```
    public func rejectedEdits() async throws -> [RejectedEdit] {
        try await exclusively {
            do {
                return try await useDatabase(notify: false) { try RejectedEdit.all(in: $0) }
            } catch let error as FerryError where error.code == .noDatabase {
                return []
            }
        }
    }

    /// Forgets rejected edits the app has shown to the user.
    ///
    /// ```swift
    /// try await client.acknowledgeRejectedEdits(undone)
    /// ```
    public func acknowledgeRejectedEdits(_ edits: [RejectedEdit]) async throws {
        let ids = edits.map(\.id)
        try await exclusively {
            do {
                _ = try await useDatabase(notify: false) { try RejectedEdit.acknowledge(ids, in: $0) }
            } catch let error as FerryError where error.code == .noDatabase {
                // Nothing was ever rejected on a device without a database.
            }
        }
    }
}
