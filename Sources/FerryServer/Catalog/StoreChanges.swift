import FerryCore

/// Tells a running server that its store has just changed (a publish in the same process, `ferry serve
/// --publish-every` or `--publish-on-change`), so that its catalog reads the store at once instead of at its next
/// poll: devices waiting on the manifest (`Prefer: wait`) hear of the new version up to one poll interval sooner.
/// A store that changes otherwise (another process, a bucket's replica) is still found by the poll.
///
/// ```swift
/// let changes = StoreChanges()
/// configuration.dependencies.storeChanges = changes
/// // after each publish into configuration.storePath:
/// await changes.changed()
/// ```
public final class StoreChanges: Sendable {
    private let catalog = Locked<SnapshotCatalog?>(nil)

    public init() {}

    /// Called once by the application it is configured into.
    func attach(_ catalog: SnapshotCatalog) { self.catalog.withLock { $0 = catalog } }

    /// Re-reads the store now. Before the server runs it does nothing; a failure is the catalog's, which logs and
    /// retries it at its next poll.
    public func changed() async {
        guard let catalog = catalog.current else { return }
        do {
            try await catalog.refresh()
        } catch {
            // Logged by the catalog's next poll, which reads the same store.
        }
    }
}
