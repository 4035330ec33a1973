import FerryCore
import FerryPostgres
import FerryStore
import Foundation
import Logging

extension SnapshotExporter {
    /// Streams one table; returns the row count, checked against PostgreSQL's `COPY n`. Two threads share the work:
    /// the calling thread receives CopyData messages from libpq, hashes them and copies them into batches; a thread
    /// of its own hands the batches to `loader` (SQLite INSERTs, or the incremental diff). A ``BatchQueue`` of a few
    /// 1 MB batches between them keeps memory flat when SQLite is the slower side.
    func load(_ plan: TablePlan, with loader: CopyLoader, from pg: PostgresConnection, digest: inout StreamingSHA256)
        throws -> Int
    {
        let start = ContinuousClock.now
        var lastReport = start
        var nextCheck = 16_384
        let progress = self.progress
        let dataset = template.dataset
        let scope = self.scope
        progress?(
            PublishProgress(dataset: dataset, table: plan.name, rows: 0, seconds: 0, finished: false, scope: scope))
        // The closure cannot capture an inout parameter: hash into a local copy and hand it back.
        digest.update("rows=\(plan.name)\n")
        var localDigest = digest
        let queue = BatchQueue()
        let table = plan.name
        let inserter = ThreadJob(name: "ferry.insert") {
            do {
                while let batch = queue.take() {
                    defer { queue.recycle(batch) }
                    try loader.consume(batch.bytes)
                    if let progress, loader.rows >= nextCheck {
                        nextCheck = loader.rows + 16_384
                        let now = ContinuousClock.now
                        if now - lastReport >= .milliseconds(250) {
                            lastReport = now
                            progress(
                                PublishProgress(
                                    dataset: dataset, table: table, rows: loader.rows, seconds: (now - start).inSeconds,
                                    finished: false, scope: scope))
                        }
                    }
                }
            } catch {
                queue.cancel()  // the receiving side stops at its next batch
                throw error
            }
        }
        let sent: Int
        do {
            sent = try pg.copyOut(plan.copySQL) { message in
                localDigest.update(message)
                try queue.put(message)
            }
            try queue.finish()
        } catch {
            queue.cancel()
            // When the inserter stopped first, its error is the cause (the COPY only saw BatchQueue.Cancelled).
            try inserter.join()
            if let error = error as? FerryError, error.code == .database {
                throw FerryError(
                    .database, "table '\(plan.name)': \(error.message)", path: template.path,
                    key: "tables[\(plan.index)]")
            }
            throw error
        }
        try inserter.join()
        digest = localDigest
        guard loader.finished, sent == loader.rows else {
            throw FerryError(
                .verification,
                "table '\(plan.name)': PostgreSQL reported \(sent) rows but \(loader.rows) arrived complete; nothing was published"
            )
        }
        let seconds = (ContinuousClock.now - start).inSeconds
        progress?(
            PublishProgress(
                dataset: dataset, table: plan.name, rows: loader.rows, seconds: seconds, finished: true, scope: scope))
        logger.debug(
            "exported table", metadata: ["table": "\(plan.name)", "rows": "\(loader.rows)", "seconds": "\(seconds)"])
        return loader.rows
    }
}
