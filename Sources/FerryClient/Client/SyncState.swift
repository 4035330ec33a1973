import FerryCore
import Foundation

/// The three sync states of a client directory: no data yet, up to date, or an update waiting to be applied.
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
    /// How the newest version here (pending, else live) arrived; nil when the client does not know (a file put
    /// there by hand, or a lost `state.json`).
    public var path: UpdatePath?
    /// When that version arrived by patch: how many rows the device had written itself (pushed or queued) that the
    /// patch settled, put back as published before it applied (docs/delta.md). Nil after a full download or when
    /// unknown.
    public var ownRowsSettled: Int?
    /// The subscribed partitions of a partitioned directory, sorted by key; nil for an unpartitioned one.
    public var partitions: [PartitionStatus]?

    public init(
        state: SyncState, version: Int? = nil, sha256: String? = nil, pendingVersion: Int? = nil,
        pendingSha256: String? = nil, previousVersion: Int? = nil, outbox: Int = 0, path: UpdatePath? = nil,
        ownRowsSettled: Int? = nil
    ) {
        self.outbox = outbox
        self.path = path
        self.ownRowsSettled = ownRowsSettled
        self.state = state
        self.version = version
        self.sha256 = sha256
        self.pendingVersion = pendingVersion
        self.pendingSha256 = pendingSha256
        self.previousVersion = previousVersion
    }
}
