import FerryCore
import Foundation

/// The bounded history (docs/delta.md, "A bounded history"): a publish thins each scope's chain by
/// ``HistoryTiers``. The steps of the versions a tier drops are merged (`sqlite3changegroup`) into the step of the
/// next version kept, written once as a new patch object from the version kept before it; so the chain still leads,
/// step by step, from its oldest point to the current version, the manifest stays small whatever the number of
/// versions published, and a catch-up merges at most one step per point.
extension FileSnapshotStore {
    /// `entry` with its chain thinned by `tiers` at `now`; `entry` itself when nothing goes. Only the current
    /// version keeps its patches (devices read no other's). Call it while holding the dataset's lock.
    public func compact(_ entry: ScopeEntry, dataset: String, tiers: HistoryTiers, now: Date) throws -> ScopeEntry {
        let chain = entry.chain
        let keep = tiers.keep(chain, now: now)
        // Only the current version keeps patches (devices read no other's): an older version's checkpoint patch
        // would otherwise stay in the store, each larger than the one before.
        let olderPatches = chain.dropLast().contains { $0.published.patches != nil }
        var kept: [VersionRecord] = []
        // The steps of the versions dropped since the last one kept; nil once one of them had none (a gap).
        var dropped: [PatchRef]? = []
        // Whether a step merged since the last checkpoint leads to the next version kept: then its file built by the
        // chain is not the recorded one byte for byte (``VersionRecord/catchUpOnly``).
        var merged = false
        for (index, original) in chain.enumerated() {
            guard keep[index] else {
                if let step = original.step { dropped?.append(step) } else { dropped = nil }
                continue
            }
            var record = original
            if record.isCheckpoint { merged = false }
            if let previous = kept.last, dropped?.isEmpty != true {
                if let steps = dropped, let step = record.step {
                    let combined = try Changeset.combine(
                        steps.map { try loadPatch(dataset: dataset, $0) } + [loadPatch(dataset: dataset, step)])
                    record.step = try storePatch(
                        dataset: dataset, changeset: combined, from: previous.version, base: previous.sha256,
                        to: record.version, limit: .max)
                    merged = !record.isCheckpoint
                } else {
                    // A version without a step was dropped: nothing leads across it any more.
                    record.step = nil
                }
            }
            if index != chain.count - 1 { record.published.patches = nil }
            if !record.isCheckpoint, merged || record.catchUpOnly == true {
                merged = true
                record.catchUpOnly = true
            }
            dropped = []
            kept.append(record)
        }
        guard kept.count < chain.count || olderPatches else { return entry }
        let firstRetained = entry.retained[0].version
        var compacted = ScopeEntry(scope: entry.scope, retained: kept.filter { $0.version >= firstRetained })
        let history = kept.filter { $0.version < firstRetained }
        compacted.history = history.isEmpty ? nil : history
        return compacted
    }
}
