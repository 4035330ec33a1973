import FerryCore

/// What the server does with one change, decided without I/O from what the server holds (the full table,
/// and where it comes from, is in docs/merge-rules.md). All times are milliseconds since the epoch.
enum MergeDecision: Equatable, Sendable {
    /// Create the row.
    case insert
    /// Write the change's values over the existing row.
    case update
    /// Delete the row and write a tombstone.
    case delete
    /// Keep the server's row and return it.
    case reject(String)
    /// The row does not exist (deleted or never there); nothing is written.
    case gone(String)
    /// An update merged per column of which the columns named in `lost` lost to the rule: the others (possibly
    /// none) are written, and the answer is `merged`.
    case merge(lost: [String], message: String)

    /// The server row as the decision needs it: its `updated_at` in milliseconds.
    struct ServerRow: Equatable, Sendable {
        var updatedMillis: Int64
    }

    /// Decides one change.
    /// - Parameters:
    ///   - row: the server's row, nil when there is none.
    ///   - tombstoned: whether the key was deleted (only consulted when there is no row).
    ///   - baseMillis: the change's `baseUpdatedAt`, nil for inserts (or when the device never saw the row).
    ///   - editedMillis: the change's `editedAt`, already normalised for the device's clock offset.
    static func decide(
        op: Change.Operation, rule: MergeRule, row: ServerRow?, tombstoned: Bool, baseMillis: Int64?,
        editedMillis: Int64
    ) -> MergeDecision {
        switch op {
        case .insert:
            guard let row else {
                return tombstoned ? .gone("the row was deleted on the server; its key cannot be used again") : .insert
            }
            // An existing key is a conflict settled by the rule (the device cannot have seen this row).
            return resolveConflict(rule: rule, row: row, editedMillis: editedMillis, apply: .update)
        case .update:
            guard let row else { return .gone("the row no longer exists on the server") }
            if let baseMillis, baseMillis == row.updatedMillis { return .update }
            return resolveConflict(rule: rule, row: row, editedMillis: editedMillis, apply: .update)
        case .delete:
            guard let row else { return .gone("the row no longer exists on the server") }
            if let baseMillis, baseMillis == row.updatedMillis { return .delete }
            // A row updated on the server since the base is kept under newest-wins and
            // server-wins (the device puts it back); client-wins deletes it.
            switch rule {
            case .clientWins: return .delete
            case .newestWins, .serverWins:
                return .reject(
                    "the row was updated on the server at \(Timestamp.format(unixMillis: row.updatedMillis)) after your copy; "
                        + "\(rule.rawValue) keeps it")
            }
        }
    }

    static func resolveConflict(rule: MergeRule, row: ServerRow, editedMillis: Int64, apply: MergeDecision)
        -> MergeDecision
    {
        let serverTime = Timestamp.format(unixMillis: row.updatedMillis)
        switch rule {
        case .clientWins:
            return apply
        case .serverWins:
            return .reject("the row changed on the server at \(serverTime); server-wins keeps the server's version")
        case .newestWins:
            if editedMillis > row.updatedMillis { return apply }
            return .reject(
                "the row changed on the server at \(serverTime), later than your edit at "
                    + "\(Timestamp.format(unixMillis: editedMillis)) (server time); newest-wins keeps the server's version"
            )
        }
    }

    /// Which columns of an update merged per column are written (`kept`) and which lose (`lost`), as indexes into
    /// its columns. An additive column is always written. On a table merged per column, a column compared with its
    /// base (`unchanged[i]` not nil) conflicts when the server's value differs from that base; any other column
    /// conflicts when the row changed since `baseMillis`. A conflict is settled by `rule`.
    static func decideColumns(
        rule: MergeRule, perColumn: Bool, row: ServerRow, unchanged: [Bool?], additive: [Bool], baseMillis: Int64?,
        editedMillis: Int64
    ) -> (kept: [Int], lost: [Int]) {
        let rowChanged = baseMillis != row.updatedMillis
        let deviceWins: Bool
        switch rule {
        case .clientWins: deviceWins = true
        case .serverWins: deviceWins = false
        case .newestWins: deviceWins = editedMillis > row.updatedMillis
        }
        var kept: [Int] = []
        var lost: [Int] = []
        for i in unchanged.indices {
            let conflict: Bool
            if additive[i] {
                conflict = false
            } else if perColumn, let same = unchanged[i] {
                conflict = !same
            } else {
                conflict = rowChanged
            }
            if !conflict || deviceWins { kept.append(i) } else { lost.append(i) }
        }
        return (kept, lost)
    }

    /// The device's `editedAt` on the server's clock: shifted by the batch's offset (`serverNow - sentAt`), and
    /// never later than the server's now.
    static func normalise(editedMillis: Int64, sentMillis: Int64, serverNowMillis: Int64) -> Int64 {
        let (offset, o1) = serverNowMillis.subtractingReportingOverflow(sentMillis)
        let (shifted, o2) = editedMillis.addingReportingOverflow(offset)
        if o1 || o2 { return serverNowMillis }
        return min(shifted, serverNowMillis)
    }
}
