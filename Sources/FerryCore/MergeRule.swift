/// How the server settles a device's edit of a row that also changed on the server (docs/merge-rules.md, which says
/// where the rules come from). Written in templates as `merge: newest-wins | server-wins | client-wins`, recorded per table in
/// every snapshot's `ferry_tables`, and applied by the server's merge engine.
///
/// ```swift
/// let rule = try MergeRule(parsing: "newest-wins")   // .newestWins
/// ```
public enum MergeRule: String, Sendable, CaseIterable, Codable {
    /// The later of the device's (clock-normalised) edit time and the server row's `updated_at` wins.
    case newestWins = "newest-wins"
    /// The server's row is kept; the device's edit is rejected.
    case serverWins = "server-wins"
    /// The device's edit overwrites the server's row.
    case clientWins = "client-wins"

    /// Parses a `merge:` value; the error names the accepted spellings.
    public init(parsing text: String) throws {
        guard let rule = MergeRule(rawValue: text) else {
            throw FerryError(
                .badTemplate,
                "unknown merge rule '\(text)': use one of \(Self.allCases.map(\.rawValue).joined(separator: " | "))",
                key: "merge")
        }
        self = rule
    }
}

/// How finely a table's ``MergeRule`` judges an edit, and which columns add instead of overwriting. Written in
/// templates as `merge: {rule: newest-wins, per: column, add: [on_hand, visits]}`; the plain `merge: newest-wins`
/// is ``rowLevel``.
///
/// - Per column: a change carries the base value of each column it changes (what the device saw before its
///   edit), and only a column whose server value differs from that base is a conflict, settled by the rule; the
///   other columns are written.
/// - Additive columns never conflict: the server adds the device's difference (new value − base) to its current
///   value, so two devices each taking 3 from 10 leave 4.
///
/// ```swift
/// let columns = ColumnMerge(perColumn: true, additive: ["on_hand"])
/// columns.isRowLevel   // false
/// ```
public struct ColumnMerge: Sendable, Equatable, Hashable, Codable {
    /// Whether conflicts are found column by column (`per: column`) rather than for the whole row.
    public var perColumn: Bool
    /// Columns whose updates add their difference to the server's value (`add: [...]`), sorted.
    public var additive: [String]

    public init(perColumn: Bool = false, additive: [String] = []) {
        self.perColumn = perColumn
        self.additive = additive.sorted()
    }

    /// Whole rows, nothing additive: the plain `merge: newest-wins | server-wins | client-wins`.
    public static let rowLevel = ColumnMerge()

    /// True for ``rowLevel``: the merge engine then judges edits exactly as before per-column merging existed.
    public var isRowLevel: Bool { !perColumn && additive.isEmpty }
}
