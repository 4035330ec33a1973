import FerryCore
import Foundation
import Logging

/// Fetch: one check with the server, and what it downloaded moved into place.
extension FerryClient {
    /// One check with the server: the manifest is revalidated with `If-None-Match` carrying the pending update's
    /// checksum if there is one, else the live database's. 304 changes nothing and moves no snapshot byte.
    /// Otherwise the version it names is downloaded from its immutable URL (`…/versions/{n}`), compressed when the
    /// server has a gzip copy, inflated into `.ferry/partial.sqlite` as it arrives (resuming an interrupted download
    /// with `Range` + `If-Range`), verified against its SHA-256, and becomes `database.db` on the initial sync, else
    /// `updated.db`. Concurrent calls share one check.
    /// Errors never touch `database.db`; `FerryError.Code.offline` is normal.
    ///
    /// ```swift
    /// let result = try await client.checkForUpdates { p in print("\(p.bytesReceived)/\(p.totalBytes ?? 0)") }
    /// ```
    public func checkForUpdates(progress: (@Sendable (FetchProgress) -> Void)? = nil) async throws -> FetchResult {
        if let runningCheck { return try await runningCheck.value }
        let task = Task { try await self.performCheck(progress: progress) }
        runningCheck = task
        defer { runningCheck = nil }
        return try await task.value
    }

    /// ``checkForUpdates(progress:)`` whose work is cancelled with the calling task: ending ``watch(_:)`` must not
    /// wait out a long-poll. (A plain check goes on when its caller is cancelled, for the other callers it serves.)
    func checkForUpdatesCancellingWithCaller() async throws -> FetchResult {
        if let runningCheck { return try await runningCheck.value }
        let task = Task { try await self.performCheck(progress: nil) }
        runningCheck = task
        defer { runningCheck = nil }
        return try await Self.value(of: task)
    }

    /// The value of `task`, which is cancelled when the calling task is.
    static func value<T: Sendable>(of task: Task<T, any Error>) async throws -> T {
        try await withTaskCancellationHandler {
            try await task.value
        } onCancel: {
            task.cancel()
        }
    }

    /// The download itself runs outside ``exclusively(_:)``: the app keeps reading and writing database.db meanwhile.
    func performCheck(progress: (@Sendable (FetchProgress) -> Void)?) async throws -> FetchResult {
        if let subscribed { return try await performPartitionedCheck(subscribed, progress: progress) }
        let downloader = try await makeDownloader()
        let dataset = downloader.dataset

        let usePatches = configuration.download.usePatches
        let (earlier, known, base) = try await exclusively {
            () async throws -> (FetchResult?, [String], SnapshotDownloader.PatchBase?) in
            try await onFiles { files, state in try files.checkDataset(dataset, &state) }
            // A download that finished before a crash but was never renamed: verify it from disk and install it first.
            var earlier: FetchResult?
            if let outcome = try await downloader.verifyCompletePartial() {
                earlier = try await install(outcome)
            }
            let (known, base) = try await onFiles { files, state in
                (try files.knownChecksums(&state), usePatches ? try files.patchBase(&state) : nil)
            }
            return (earlier, known, base)
        }
        var outcome = try await downloader.check(knownChecksums: known, patchBase: base, progress: progress)
        if case .patch(let patch) = outcome {
            do {
                if let applied = try await patchInPlace(patch) { return applied }
                outcome = .downloaded(try await build(patch))
            } catch let error as FerryError where error.code != .offline && !FerryError.isOutOfSpace(error) {
                // A full disk is reported as it is: the full download needs at least the space the copy did.
                logger.warning(
                    "the patch did not apply; taking the full download",
                    metadata: ["from": "\(patch.ref.from)", "to": "\(patch.ref.to)", "error": "\(error.message)"])
                downloader.patchFailure.withLock { $0 = error.message }
                outcome = try await downloader.check(knownChecksums: known, patchBase: nil, progress: progress)
            }
        }
        let patchFailure = downloader.patchFailure.withLock { $0 }
        var result = try await exclusively {
            if case .notModified = outcome {
                logger.debug("not modified", metadata: ["dataset": "\(dataset)"])
                try await onFiles { files, state in files.notModified(&state) }
                if let earlier { return earlier }
                return FetchResult.notModified(.init(status: try await currentStatus()))
            }
            return try await install(outcome)
        }
        let pacing = downloader.manifestPacing.withLock { $0 }
        (result.check.patchFailure, result.check.waitApplied) = (patchFailure, pacing.waitApplied)
        result.check.retryAfter = pacing.retryAfter
        return result
    }

    /// Builds the next version from a downloaded patch: a copy of the base taken while no other operation runs
    /// (so it holds committed data), the patch applied to the copy off the actor, then checked (see
    /// ``PatchApplier``). The app keeps using database.db meanwhile; edits it makes are in the outbox, which the
    /// apply replays on top as after a full download.
    func build(_ patch: SnapshotDownloader.DownloadedPatch) async throws -> SnapshotDownloader.Verified {
        let scratch = directory.patched
        let method = try await exclusively {
            try await onFiles { files, state in try files.clonePatchBase(patch.base, &state) }
        }
        let started = ContinuousClock.now
        let applied = try await BlockingWork.run {
            try PatchApplier.apply(
                to: scratch, copy: method, patch: patch.changeset, expected: patch.target,
                baseDigest: patch.base.contentDigest, rule: patch.rule)
        }
        logger.info(
            "patch applied",
            metadata: [
                "from": "\(patch.ref.from)", "to": "\(patch.ref.to)", "bytes": "\(patch.bytesReceived)",
                "copy": "\(applied.copy.rawValue)",
                "ownRows": "\(applied.ownRowsSettled)", "vacuumed": "\(applied.vacuumed)",
                "digest": "\(applied.digestCheck.rawValue)",
                "seconds": "\((ContinuousClock.now - started).components.seconds)",
            ])
        let target = patch.target
        let info = SnapshotInfo(
            sha256: target.sha256, version: target.version, schemaVersion: target.schemaVersion,
            dataset: patch.base.info.dataset)
        var stats = TransferStats(
            bytesReceived: patch.bytesReceived, resumedFrom: 0, fileBytes: FileIdentity.size(of: scratch),
            encoding: .gzip)
        stats.publishedBytes = target.size
        return SnapshotDownloader.Verified(
            info: info, stats: stats, file: scratch, path: .patch(from: patch.ref.from, to: patch.ref.to),
            contentDigest: target.contentDigest,
            ownRowsSettled: applied.ownRowsSettled)
    }

    /// Moves a verified partial into place (see ``ClientFiles/install(_:_:)``) and opens it after the initial sync.
    func install(_ outcome: SnapshotDownloader.Outcome) async throws -> FetchResult {
        switch try await onFiles({ files, state in try files.install(outcome, &state) }) {
        case .alreadyPresent(let stats):
            return .notModified(
                .init(
                    status: try await currentStatus(), bytesReceived: stats.bytesReceived,
                    resumedFrom: stats.resumedFrom))
        case .installed(let outcome, let info, let stats, let path):
            if outcome == .initialSync, host != nil {
                _ = try await applyInPlace()
            }
            if outcome == .initialSync { try await openConnection() }
            let status = try await currentStatus()
            let fileBytes = stats.fileBytes ?? FileIdentity.size(of: directory.database) ?? 0
            let download = FetchResult.Download(
                version: info.version ?? 0, sha256: info.sha256, fileBytes: fileBytes,
                publishedBytes: stats.publishedBytes ?? fileBytes, encoding: stats.encoding ?? .identity, path: path,
                ownRowsSettled: path == .full ? nil : status.ownRowsSettled,
                check: .init(status: status, bytesReceived: stats.bytesReceived, resumedFrom: stats.resumedFrom))
            return outcome == .initialSync ? .initialSync(download) : .updateDownloaded(download)
        }
    }
}
