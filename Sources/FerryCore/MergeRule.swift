/// How the server settles a device's edit of a row that also changed on the server (the thesis' merge rules,
/// Table 3.5.1). Written in templates as `merge: newest-wins | server-wins | client-wins`, recorded per table in
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
