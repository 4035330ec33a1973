import FerryCore
import FerryPostgres
import FerryStore
import Foundation
import HTTPTypes
import NIOPosix

/// Answers "why does this device not show row R?" (`GET /v1/datasets/{dataset}/explain`, `ferry explain`) from
/// what the server knows: the fleet's record of the device (the version it holds, its scope), the store's manifest
/// (each version's `createdAt`), and PostgreSQL (``RowFacts``). It never writes.
///
/// The version a row last changed in is the first version published after its `updated_at`: a publish stamps
/// `createdAt` before it opens its snapshot, so a row changed before that time is in that version and one changed
/// after it is not. This costs one index lookup, whatever the dataset's size (reading the versions' files instead
/// would cost a scan of each). It follows the row's own `updated_at`: a row that entered a scope because another
/// row changed (its parent, the scope's values) is dated by its own last change.
struct RowExplainer: Sendable {
    let catalog: SnapshotCatalog
    let fleet: DeviceFleet
    /// The templates by dataset (a schema line by its line name).
    let templates: [String: Template]

    /// The explanation, or a ``ServerError``: 404 naming an unknown dataset or device, 400 naming a bad row.
    func explain(dataset: String, device: String, row reference: RowReference) async throws -> RowExplanation {
        guard catalog.access(dataset) != nil,
            let template = templates[dataset] ?? templates[DatasetName.base(of: dataset) ?? ""]
        else {
            throw ServerError(
                .notFound, code: .notFound,
                "unknown dataset '\(dataset)': this server publishes no such dataset from a template it was given")
        }
        guard let record = try await fleet.device(device, dataset: dataset).first else {
            throw ServerError(
                .notFound, code: "unknown-device",
                "unknown device '\(device)' for dataset '\(dataset)': the server has not seen it (or forgot it after --device-retention); check the id with `ferry status --json`"
            )
        }
        let store = catalog.store
        let manifest = try await NIOThreadPool.singleton.runIfActive { try store.storedManifest(for: dataset) }
        var facts: RowFacts
        do {
            facts = try await fleet.pool.withConnection { pg in
                try RowFacts.read(
                    reference, template: try template.resolvingPrimaryKeys(using: pg), dataset: dataset,
                    device: device, scope: record.scope, on: pg)
            }
        } catch let error as FerryError where error.code == .badInput || error.code == .badTemplate {
            throw ServerError(.badRequest, code: error.code, error.description)
        } catch let error as PostgresQueryError {
            // A key part PostgreSQL cannot read as the key's type (22P02) is the caller's; anything else is ours.
            if error.sqlState.hasPrefix("22") {
                throw ServerError(.badRequest, code: .badInput, "row '\(reference.text)': \(error.message)")
            }
            throw error
        }
        // A partitioned dataset's row is judged by its own stream: its partition's, or the shared one.
        let stream = template.partition == nil ? record.scope : (facts.partition ?? PartitionLayout.sharedStream)
        if template.partition != nil, let key = facts.partition, manifest?.entry(for: key) == nil {
            facts.inScope = false
            facts.rule =
                "its partition \(key.debugDescription) is not published (not among partition.values, or retired)"
        }
        guard
            let entry = manifest?.entry(for: template.hasStreams ? stream : nil)
                ?? manifest?.entry(for: template.partition == nil ? nil : PartitionLayout.sharedStream)
                ?? manifest?.scopes.last
        else {
            throw ServerError(.notFound, code: .notFound, "dataset '\(dataset)' has no published version yet")
        }
        let timeline = entry.chain.map { (version: $0.version, createdAt: $0.createdAt) }
        let merge = template.tables.first { $0.name == reference.table }?.merge.rawValue
        return Self.explanation(
            dataset: dataset, record: record, reference: reference, facts: facts, timeline: timeline,
            current: entry.current.version, merge: merge)
    }

    /// The first version of `timeline` created after `time` (nil when none, or `time` is nil).
    static func version(after time: String?, in timeline: [(version: Int, createdAt: String)]) -> Int? {
        guard let millis = time.flatMap(Timestamp.parseMillis) else { return nil }
        return timeline.first { Timestamp.parseMillis($0.createdAt).map { $0 > millis } ?? false }?.version
    }

    /// Puts the facts together, and the one-line verdict.
    static func explanation(
        dataset: String, record: DeviceRecord, reference: RowReference, facts: RowFacts,
        timeline: [(version: Int, createdAt: String)], current: Int, merge: String?
    ) -> RowExplanation {
        let changedIn = version(after: facts.present ? facts.updatedAt : facts.deletedAt, in: timeline)
        var row = RowExplanation.Row(
            present: facts.present, inScope: facts.present && facts.inScope, rule: facts.rule,
            lastChangedIn: changedIn, changedAt: facts.present ? facts.updatedAt : facts.deletedAt)
        row.partition = facts.partition
        var verdict = verdict(
            record: record, row: row, changes: facts.changes, current: current, merge: merge)
        if let key = facts.partition, row.inScope {
            verdict.text =
                "the row is in partition \(key.debugDescription): a device holds it only while subscribed to it (`ferry subscribe … \(key)`); "
                + verdict.text
        }
        return RowExplanation(
            dataset: dataset, device: record.device, deviceVersion: record.heldVersion, currentVersion: current,
            scope: record.scope, table: reference.table, key: reference.key, row: row, changes: facts.changes,
            verdict: verdict)
    }

    static func verdict(
        record: DeviceRecord, row: RowExplanation.Row, changes: [RowExplanation.Change], current: Int, merge: String?
    ) -> RowExplanation.Verdict {
        guard let held = record.heldVersion else {
            return .init(
                code: "never-synced",
                text:
                    "the device has never downloaded a version of \(record.dataset) (first seen \(record.firstSeen), last \(record.lastSeen))"
            )
        }
        guard row.present else {
            guard let deleted = row.lastChangedIn else {
                if row.changedAt != nil {
                    return .init(
                        code: "deleted",
                        text:
                            "the row was deleted at \(row.changedAt!), after version \(current): it leaves the device with the next publish"
                    )
                }
                return .init(code: "deleted", text: "the row is not in PostgreSQL (deleted, or never there)")
            }
            return .init(
                code: "deleted",
                text: held < deleted
                    ? "the row was deleted in version \(deleted); the device's copy is from before (it holds \(held))"
                    : "the row was deleted in version \(deleted); the device holds \(held), without it")
        }
        guard row.inScope else {
            let scope = record.scope.map { "scope \($0)" } ?? "the device's scope"
            return .init(code: "out-of-scope", text: "the row is outside \(scope) (\(row.rule ?? "the template"))")
        }
        if let last = changes.last {
            let when = String(last.at.dropFirst(11).prefix(5))
            if last.status == "rejected" || last.status == "gone" || last.status == "invalid"
                || last.status == "forbidden"
            {
                let why = last.status == "rejected" ? (merge ?? "the merge rule") : (last.message ?? last.status)
                return .init(
                    code: "edit-rejected", text: "the device's edit of \(when) was \(last.status): \(why)")
            }
            if last.status == "merged" {
                let lost = (last.lost ?? []).joined(separator: ", ")
                return .init(
                    code: "edit-merged",
                    text:
                        "the device's edit of \(when) was merged; its values of \(lost) lost to \(merge ?? "the merge rule")"
                )
            }
        }
        if let changed = row.lastChangedIn, changed > held {
            return .init(
                code: "will-arrive",
                text:
                    "the device holds version \(held); the row changed in \(changed): it will arrive at its next fetch")
        }
        if row.lastChangedIn == nil, row.changedAt != nil {
            return .init(
                code: "will-arrive",
                text:
                    "the row changed at \(row.changedAt!), after version \(current): it arrives with the next publish, then at the device's next fetch"
            )
        }
        let changed = row.lastChangedIn.map { "as last changed in version \($0)" } ?? "as published"
        return .init(code: "present", text: "the device holds version \(held), which has the row \(changed)")
    }
}
