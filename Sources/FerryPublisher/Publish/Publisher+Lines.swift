import FerryCore
import FerryPostgres
import FerryStore
import Foundation
import Logging

/// Schema lines (docs/schema-lines.md): one dataset published from several templates, one per `schemaVersion:`, so
/// devices running older app builds keep syncing. Each line is its own store dataset, `DATASET.vN`, with its own
/// versions, patches, gzip copies, retention and row index.
///
/// One publish of the lines takes the dataset's lock (the one a single-template publish takes), opens one
/// `REPEATABLE READ` snapshot (``SnapshotHolder``) and exports every line from it, so version N of every line
/// holds the same cut of PostgreSQL. A changed line gets the next version number of all the lines (one more than
/// any line has given), an unchanged one keeps its version. A line in the store whose template is no longer given
/// is retired: its manifest records `retiredAt`, and the server answers it `410 Gone`. Giving its template again
/// brings it back. Once a dataset has lines, a publish with one `--config` publishes that one line and retires
/// the others.
extension Publisher {
    func publishLines(
        _ templates: [Template], store: FileSnapshotStore, started: ContinuousClock.Instant, changed: Set<String>?,
        isCancelled: @escaping @Sendable () -> Bool
    ) throws -> PublishResult {
        try Template.validateLines(templates.map { ($0, $0.path) })
        let dataset = templates[0].dataset
        let lock = try lockDataset(dataset, in: store)
        defer { lock.unlock() }

        let ordered = templates.sorted { $0.schemaVersion < $1.schemaVersion }
        let existing = try store.lines(of: dataset)
        let names = ordered.map { DatasetName.line(base: dataset, schemaVersion: $0.schemaVersion) }
        var version = 1
        for name in Set(names).union(existing.map(\.name)) {
            let removed = try store.cleanLeftovers(dataset: name)
            if removed > 0 {
                logger.info(
                    "removed leftovers of an interrupted publish",
                    metadata: ["dataset": "\(name)", "files": "\(removed)"])
            }
            version = max(version, try store.nextVersion(dataset: name))
        }
        if isCancelled() { throw CancellationError() }

        let holder = try SnapshotHolder(databaseURL: configuration.databaseURL)
        var results: [PublishResult] = []
        for (template, name) in zip(ordered, names) {
            var line = template
            line.dataset = name
            var result = try publish(
                template: line, store: store, started: started, changed: changed, isCancelled: isCancelled,
                snapshotID: holder.snapshotID, version: version)
            result.seconds = (ContinuousClock.now - started).inSeconds
            results.append(result)
        }
        withExtendedLifetime(holder) {}

        let retiredAt = Timestamp.format(Date())
        var retired: [Int] = []
        for line in existing where !names.contains(line.name) {
            if try store.retire(line: line.name, at: retiredAt) {
                logger.notice(
                    "schema line retired: its template was not given; devices on it are told to update the app",
                    metadata: ["dataset": "\(line.name)"])
            }
            retired.append(line.schemaVersion)
        }
        var result = results[results.count - 1]
        result.lines = results
        result.retiredLines = retired
        result.unchanged = results.allSatisfy(\.unchanged)
        result.seconds = (ContinuousClock.now - started).inSeconds
        return result
    }
}
