import FerryCore
import Foundation
import Logging

/// What one ``FerryClient/push(batchSize:)`` did.
public struct PushResult: Sendable, Equatable {
    /// Per-status counts of the server's answers.
    public var summary: Outbox.Summary
    /// Edits uploaded (answered or not).
    public var sent: Int
    /// Edits still queued afterwards (those naming an attachment still queued among them).
    public var remaining: Int
    /// The attachments uploaded before the edits, and those still queued.
    public var attachments = AttachmentPushSummary()
}

/// What one ``FerryClient/sync()`` did: push, then fetch, then apply.
public struct SyncResult: Sendable, Equatable {
    public var push: PushResult
    public var fetch: FetchResult
    public var apply: ApplyResult?
    /// The attachments brought in line with the applied version (nil when no version is live).
    public var attachments: AttachmentSync?

    public init(push: PushResult, fetch: FetchResult, apply: ApplyResult?, attachments: AttachmentSync? = nil) {
        self.push = push
        self.fetch = fetch
        self.apply = apply
        self.attachments = attachments
    }
}

extension FerryClient {
    /// Number of local edits waiting for the server's answer.
    ///
    /// ```swift
    /// let waiting = try await client.pendingEdits()
    /// ```
    public func pendingEdits() async throws -> Int {
        try await exclusively {
            guard directory.exists(directory.database) else { return 0 }
            do {
                return try await useDatabase(notify: false) { try Outbox.count(in: $0) }
            } catch let error as FerryError where error.code == .noDatabase && host != nil {
                return 0  // the app's database before its initial sync: nothing can be queued yet
            }
        }
    }

    /// Runs one SQL statement on the live database (what `ferry exec` does): selects return rows, writes to
    /// writable tables are captured in the outbox, writes to read-only tables fail with a clear error.
    ///
    /// ```swift
    /// let result = try await client.execute("UPDATE trips SET passengers = 1 WHERE name = 'Växjö-Kalmar'")
    /// ```
    public func execute(_ sql: String) async throws -> StatementResult {
        try await withDatabase { try LocalStatement.run(sql, on: $0) }
    }

    /// Uploads the edits queued when it starts, in order, in batches, and writes the server's answers (the winning
    /// rows)
    /// locally; edits the app makes meanwhile wait for the next push.
    /// Call it when the app goes to the background or becomes active (the app's lifecycle hooks); `open`
    /// starts one in the background. A network failure is retried with backoff (`Configuration.push.attempts`), then thrown
    /// with the edits still queued; a crash at any point resends the same change ids, which the server answers
    /// once. A refused access token throws `FerryError.Code.unauthorized` at once, the edits still queued: after
    /// signing in again, the next push sends them with the same change ids. Concurrent calls share one push.
    @discardableResult
    public func push(batchSize: Int = 500) async throws -> PushResult {
        if let runningPush { return try await runningPush.value }
        let task = Task { try await self.performPush(batchSize: max(1, min(batchSize, 10_000))) }
        runningPush = task
        defer { runningPush = nil }
        return try await task.value
    }

    /// Push, then check for updates, then apply what arrived: one round trip for an app that came back online.
    ///
    /// ```swift
    /// let result = try await client.sync()
    /// ```
    public func sync() async throws -> SyncResult {
        let pushed = try await push()
        let fetched = try await checkForUpdates()
        var applied: ApplyResult?
        if try await status().state == .updatePending { applied = try await applyPendingUpdate() }
        let attachments = try await syncAttachments()
        return SyncResult(push: pushed, fetch: fetched, apply: applied, attachments: attachments)
    }

    /// Starts pushing the edits queued at open, in a task the client owns (``close()`` cancels it), when
    /// `configuration.push.onOpen` is true and a server and dataset are set.
    func startLaunchPush() {
        guard configuration.push.onOpen, configuration.serverURL != nil, configuration.dataset != nil else { return }
        launchPush = Task { await self.pushOnLaunch() }
    }

    private func pushOnLaunch() async {
        do {
            let edits = try await pendingEdits()
            let attachments = try await pendingAttachments().count
            guard edits > 0 || attachments > 0 else { return }
        } catch {
            logger.warning("cannot count the pending edits on launch; they are not pushed now: \(error)")
            return
        }
        do {
            let result = try await pushCancellingWithCaller()
            logger.info(
                "pushed pending edits on launch",
                metadata: ["sent": "\(result.sent)", "remaining": "\(result.remaining)"])
        } catch {
            logger.notice("pending edits stay queued: \(error)")
        }
    }

    /// ``push(batchSize:)`` whose upload is cancelled with the calling task (``close()`` must not wait out a server
    /// that does not answer). A push already running for another caller is shared and not cancelled.
    private func pushCancellingWithCaller() async throws -> PushResult {
        if let runningPush { return try await runningPush.value }
        let task = Task { try await self.performPush(batchSize: 500) }
        runningPush = task
        defer { runningPush = nil }
        return try await Self.value(of: task)
    }

    private func performPush(batchSize: Int) async throws -> PushResult {
        guard let server = configuration.serverURL else {
            throw FerryError(.badInput, "pushing needs a server: set Configuration.serverURL", key: "serverURL")
        }
        guard let dataset = configuration.dataset else {
            throw FerryError(.badInput, "pushing needs a dataset: set Configuration.dataset", key: "dataset")
        }
        try DatasetName.validateBase(dataset)
        let uploader = ChangeUploader(server: server, transport: transport)
        let clientID = try await deviceID()
        var summary = Outbox.Summary()
        var sent = 0
        // Every queued attachment first: an edit that names one goes only once the server holds it.
        let attachments = try await attachmentUploader().uploadAll()
        // Nothing queued (or no database yet, before the initial sync): nothing to send, and no request is made.
        guard try await pendingEdits() > 0 else {
            return PushResult(summary: summary, sent: 0, remaining: 0, attachments: attachments)
        }
        // The edits queued now: an app that keeps writing while the push runs must not keep it running forever. An
        // edit naming an attachment still queued stops the push there: it and every later edit wait, in order.
        let blocked = attachments.pendingIDs
        let last = try await exclusively {
            try await useDatabase(notify: false) { db in
                let last = try Outbox.lastSequence(in: db)
                guard !blocked.isEmpty, let first = try Outbox.firstSequence(naming: blocked, in: db) else {
                    return last
                }
                return min(last, first - 1)
            }
        }
        while true {
            // One schema line's edits per batch: each goes to its line's URL (edits queued before a swap to another
            // line carry that line; the others are of the line database.db holds, or the dataset before any).
            let (lineBatch, current) = try await exclusively {
                try await useDatabase(notify: false) { db in
                    (
                        try Outbox.takeLineBatch(from: db, limit: batchSize, through: last),
                        try Outbox.currentLine(of: db)
                    )
                }
            }
            let batch = lineBatch.changes
            if batch.isEmpty { break }
            let line = lineBatch.line ?? current ?? dataset
            let request = ChangeBatch(
                clientId: clientID, sentAt: Timestamp.format(configuration.push.clock()), changes: batch)
            let results: ChangeResults
            do {
                results = try await uploadWithRetry(request, dataset: line, uploader: uploader)
            } catch let error as FerryError where error.code == .schemaRetired && lineBatch.line != nil {
                // A retired line takes none of the edits queued under it before the device moved to another line
                // (410, nothing applied): they end as `gone`, kept in ferry_rejected. The current line's own edits
                // stay queued instead (below, thrown): the app needs an update, not a loss.
                results = ChangeResults(
                    results: batch.map { ChangeResult(id: $0.id, status: .gone, row: nil, message: error.message) })
            }
            let ids = Set(batch.map(\.id))
            guard results.results.allSatisfy({ ids.contains($0.id) }) else {
                throw FerryError(.network, "the server answered for changes it was not sent; edits stay queued")
            }
            let tables = liveTables
            let logger = self.logger
            let recorded = try await withDatabase { db in
                try Outbox.record(results.results, for: batch, in: db, tables: tables, line: lineBatch.line) {
                    logger.warning("\($0)")
                }
            }
            summary.merge(recorded)
            sent += batch.count
            if recorded.unanswered > 0 { break }
        }
        return PushResult(
            summary: summary, sent: sent, remaining: try await pendingEdits(), attachments: attachments)
    }

    private func uploadWithRetry(_ batch: ChangeBatch, dataset: String, uploader: ChangeUploader) async throws
        -> ChangeResults
    {
        var delay = configuration.push.backoff
        var attempt = 1
        while true {
            do {
                // Asked on every attempt, so a token refreshed meanwhile is used. A refused token (.unauthorized) and
                // an untrusted certificate are not retried: the same request would be refused again.
                let token = try await configuration.tokenProvider?()
                return try await uploader.upload(batch, dataset: dataset, accessToken: token)
            } catch let error as FerryError
                where TransportFailure.isWorthRetrying(error) && attempt < configuration.push.attempts
            {
                logger.notice(
                    "upload failed, retrying", metadata: ["attempt": "\(attempt)", "error": "\(error.message)"])
                try await Task.sleep(for: delay)
                delay *= 2
                attempt += 1
            }
        }
    }
}
