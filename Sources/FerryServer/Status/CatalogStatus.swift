import FerryCore
import FerryStore
import Foundation

/// What the status page reads from the catalog, and nothing more: per dataset, each view's manifest with its
/// retained version records, whether the dataset is scoped, plus the time of the last poll and the datasets whose
/// manifest could not be read. Built by `SnapshotCatalog.statusSnapshot()`.
struct CatalogStatus: Sendable {
    /// One audience's view: the public one, or one scope's (its scope value is deliberately not kept).
    struct View: Sendable {
        let manifest: Manifest
        /// Retained versions' records, ascending by version.
        let retained: [VersionRecord]
    }

    struct Dataset: Sendable {
        let name: String
        let scoped: Bool
        /// A retired schema line (docs/schema-lines.md).
        var retired = false
        /// Distinct `Ferry-Device` ids seen in the last 24 h.
        var devices = 0
        let views: [View]
        /// The patch history (docs/delta.md, "Catching up"); nil without a patch horizon.
        var history: StatusReport.History?
        /// What the server made on request for the dataset (``BuildCache``, ``BuildLane``).
        var builds: StatusReport.Builds?
    }

    /// Sorted by name.
    let datasets: [Dataset]
    /// When the catalog last finished reading the store; nil before the first poll.
    let lastPoll: Date?
    /// Datasets whose current `manifest.json` could not be loaded, sorted.
    let unreadableManifests: [String]
}
