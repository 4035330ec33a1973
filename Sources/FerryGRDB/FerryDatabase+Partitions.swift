import FerryClient
import FerryCore
import Foundation

extension FerryDatabase {
    /// The keys of the partitions this device subscribes to, sorted; empty for an unpartitioned dataset.
    ///
    /// ```swift
    /// let projects = await ferry.subscriptions   // ["1", "7"]
    /// ```
    public var subscriptions: [String] {
        get async { await client.subscriptions }
    }

    /// Adds partitions of a partitioned dataset to the device's set, checked with the server at once (an unknown,
    /// forbidden or retired key throws, naming it, and nothing changes). The next ``checkForUpdates()`` brings their
    /// rows into the pool's database, applied as its ``ApplyMode`` says.
    ///
    /// ```swift
    /// try await ferry.subscribe(["7"])
    /// try await ferry.sync()
    /// ```
    public func subscribe(_ keys: [String]) async throws {
        try await client.subscribe(keys)
    }

    /// Removes partitions from the device's set. The next ``checkForUpdates()`` removes their rows, except the rows
    /// a queued edit still names, which stay until the edit is answered.
    ///
    /// ```swift
    /// try await ferry.unsubscribe(["3"])
    /// ```
    public func unsubscribe(_ keys: [String]) async throws {
        try await client.unsubscribe(keys)
    }
}
