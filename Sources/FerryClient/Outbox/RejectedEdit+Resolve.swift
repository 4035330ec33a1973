import FerryCore
import Foundation

/// Resolving a kept edit: send it again on top of the server's row, or keep the server's row.
extension RejectedEdit {
    /// Queues a new edit of the rejected edit's row with `values`, based on the server's row the edit lost to
    /// (``serverValues``: its `updated_at` and, per column, its values are the new edit's base), writes `values`
    /// into the local row, and forgets the rejected edit: all in one transaction. The new edit is an ordinary
    /// queued edit with a new change id (exactly once, like any other); it goes up with the next push. A rejected
    /// delete with no `values` queues the delete again. Returns the new change id.
    ///
    /// Throws when no kept edit has `id`, when the row is gone (insert it anew instead), or when `values` names
    /// a column the table does not have.
    ///
    /// ```swift
    /// let changeID = try RejectedEdit.resubmit(edit.id, values: ["note": .string("both")], in: db, tables: tables)
    /// ```
    @discardableResult
    public static func resubmit(
        _ id: String, values: [String: JSONValue], in db: SQLiteConnection, tables: [SnapshotMetadata.TableInfo]
    ) throws -> String {
        try db.transaction {
            let edit = try kept(id, in: db)
            guard edit.outcome != .gone, let server = edit.serverValues else {
                throw FerryError(
                    .badInput,
                    "rejected edit \(id) cannot be resubmitted: "
                        + (edit.outcome == .gone
                            ? "its row was deleted on the server; insert a new row instead"
                            : "it was kept without the server's row; discard it and edit the row again"),
                    key: id)
            }
            guard let table = tables.first(where: { $0.name == edit.table }), table.writable else {
                throw FerryError(
                    .badInput, "rejected edit \(id) names table '\(edit.table)', which is not writable here", key: id)
            }
            let op: Change.Operation = edit.operation == .delete && values.isEmpty ? .delete : .update
            let existing = try Outbox.columns(table, db)
            let stamps = [table.createdColumn, table.updatedColumn].compactMap { $0 }
            for name in values.keys.sorted()
            where !existing.contains(name) || table.primaryKey.contains(name) || stamps.contains(name) {
                throw FerryError(
                    .badInput, "column '\(name)' is not a value column of \(table.name) that an edit can set",
                    key: "\(table.name).\(name)")
            }
            guard op == .delete || !values.isEmpty else {
                throw FerryError(.badInput, "resubmitting rejected edit \(id) needs at least one value", key: id)
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            func json<T: Encodable>(_ value: T) throws -> SQLiteValue {
                .text(String(decoding: try encoder.encode(value), as: UTF8.self))
            }
            let changeID = UUID().uuidString.lowercased()
            let base = server.filter { values[$0.key] != nil }
            try db.run(
                """
                INSERT INTO ferry_outbox(id, tbl, op, key, vals, editedAt, baseUpdatedAt, base)
                VALUES (?, ?, ?, ?, ?, \(OutboxSchema.nowSQL), ?, ?)
                """,
                [
                    .text(changeID), .text(table.name), .text(op.rawValue),
                    .text(try Outbox.keyText(edit.key, table: table, db: db)), try json(values),
                    table.updatedColumn.flatMap { server[$0] }.map(Outbox.sqliteValue) ?? .null,
                    op == .update ? try json(base) : .null,
                ])
            // Capture is switched back on at the end of this transaction; if it fails, its rollback restores it.
            try Outbox.setCapture(false, db)
            // The row as the database holds it now is recorded first, so the next patch can put it back.
            try Outbox.rememberQueuedRows(in: db, tables: tables)
            if op == .delete {
                try Outbox.deleteRow(key: edit.key, table: table, db: db)
            } else {
                try Outbox.updateRow(key: edit.key, values: values, table: table, db: db)
            }
            try Outbox.setCapture(true, db)
            try db.run("DELETE FROM ferry_rejected WHERE id = ?", [.text(id)])
            return changeID
        }
    }

    /// Forgets the rejected edit `id` and keeps the server's row, which the device already shows. Throws when no
    /// kept edit has that id.
    ///
    /// ```swift
    /// try RejectedEdit.discard(edit.id, in: db)
    /// ```
    public static func discard(_ id: String, in db: SQLiteConnection) throws {
        try db.transaction {
            _ = try kept(id, in: db)
            try db.run("DELETE FROM ferry_rejected WHERE id = ?", [.text(id)])
        }
    }

    /// The kept edit `id`, or an error naming it.
    static func kept(_ id: String, in db: SQLiteConnection) throws -> RejectedEdit {
        guard let edit = try all(in: db).first(where: { $0.id == id }) else {
            throw FerryError(.notFound, "no rejected edit has id '\(id)'; `ferry rejected list` shows them", key: id)
        }
        return edit
    }
}

extension FerryClient {
    /// Sends a rejected edit again with `values`, on top of the server's row it lost to, and forgets the rejected
    /// edit, in one transaction (see ``RejectedEdit/resubmit(_:values:in:tables:)``). The new edit is queued; it
    /// goes up with the next push. Returns its change id.
    ///
    /// ```swift
    /// let edit = try await client.rejectedEdits()[0]
    /// try await client.resubmit(edit, values: ["note": .string("checked twice")])
    /// try await client.push()
    /// ```
    @discardableResult
    public func resubmit(_ edit: RejectedEdit, values: [String: JSONValue]) async throws -> String {
        let id = edit.id
        return try await exclusively {
            try await useDatabase(notify: true) { db in
                try RejectedEdit.resubmit(
                    id, values: values, in: db, tables: try SnapshotMetadata.read(from: db).tables)
            }
        }
    }

    /// Forgets a rejected edit and keeps the server's row, which the device already shows.
    ///
    /// ```swift
    /// try await client.discard(edit)
    /// ```
    public func discard(_ edit: RejectedEdit) async throws {
        let id = edit.id
        try await exclusively {
            try await useDatabase(notify: false) { try RejectedEdit.discard(id, in: $0) }
        }
    }
}
