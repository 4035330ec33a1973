/// How the server settles a device's edit of a row that also changed on the server (the thesis' merge rules).
/// Written in templates as `merge: newest-wins | server-wins | client-wins`.
///
/// ```swift
/// MergeRule(rawValue: "newest-wins") // .newestWins
/// ```
public enum MergeRule: String, Sendable, CaseIterable, Codable {
    /// The row with the later `updated` timestamp wins.
    case newestWins = "newest-wins"
    /// The server's row is kept; the device's edit is rejected.
    case serverWins = "server-wins"
    /// The device's edit overwrites the server's row.
    case clientWins = "client-wins"
}
