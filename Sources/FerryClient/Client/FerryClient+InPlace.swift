import FerryCore
import Foundation
import Logging

/// In place: the app holds the live database (FerryGRDB's pool), so updates are applied on its writer instead of by
/// renaming files.
extension FerryClient {
    /// Applies `updated.db` in place on the host's writer (see ``ClientFiles/applyInPlace(writer:_:)``).
    func applyInPlace() async throws -> InPlaceOutcome {
        let outcome = try await onWriter(transaction: false) { files, writer, state in
            try files.applyInPlace(writer: writer, &state)
        }
        liveTables = outcome.tables
        return outcome
    }

    /// Applies a downloaded patch to the live database as it arrives (``patchesOnArrival``): the live version is
    /// kept as `previous.db`, then the patch is applied and verified inside one write transaction on the host's
    /// writer, queued edits replayed on top. Nil when this client does not apply patches in place. What fails
    /// leaves the live database as it was (the transaction rolls back) and is thrown: the caller takes the full
    /// download.
    func patchInPlace(_ patch: SnapshotDownloader.DownloadedPatch) async throws -> FetchResult? {
        guard patchesOnArrival, patch.base.file == directory.database else { return nil }
        return try await exclusively {
            let started = ContinuousClock.now
            let base = patch.base.info
            try await onWriter(transaction: false) { files, writer, state in
                try files.keepLiveForPatch(writer: writer, base: base, &state)
            }
            let tables = liveTables
            let (info, applied) = try await onWriter(transaction: true) { files, writer, state in
                try files.applyPatchInPlace(writer: writer, patch: patch, tables: tables, &state)
            }
            try await onFiles { files, state in files.save(state, during: "apply") }
            logger.info(
                "patch applied in place",
                metadata: [
                    "from": "\(patch.ref.from)", "to": "\(patch.ref.to)", "bytes": "\(patch.bytesReceived)",
                    "ownRows": "\(applied.ownRowsSettled)", "digest": "\(applied.digestCheck.rawValue)",
                    "seconds": "\((ContinuousClock.now - started).components.seconds)",
                ])
            return .updateDownloaded(
                .init(
                    version: info.version ?? patch.ref.to, sha256: info.sha256,
                    fileBytes: FileIdentity.size(of: directory.database) ?? patch.target.size,
                    publishedBytes: patch.target.size, encoding: .gzip,
                    path: .patch(from: patch.ref.from, to: patch.ref.to), ownRowsSettled: applied.ownRowsSettled,
                    check: .init(status: try await currentStatus(), bytesReceived: patch.bytesReceived)))
        }
    }

    /// Runs `work` on the host's writer, in one write transaction or outside any (SQLite's backup API needs that),
    /// with the directory's files and the checksum cache (kept even when `work` throws, as in ``onFiles(_:)``).
    func onWriter<T: Sendable>(
        transaction: Bool,
        _ work: @escaping @Sendable (ClientFiles, SQLiteConnection, inout ClientStateFile) throws -> T
    ) async throws -> T {
        guard let host else { throw FerryError(.badInput, "an in-place apply needs the app's database (FerryGRDB)") }
        var scratch = ClientFiles(directory: directory, configuration: configuration, logger: logger)
        scratch.inPlace = true
        let files = scratch
        // The cache comes back even when `work` throws; a throw inside a transaction also makes the host roll it back.
        let box = Locked(state)
        let body: @Sendable (SQLiteConnection) throws -> T = { writer in
            var state = box.current
            defer { box.withLock { [state] in $0 = state } }
            return try work(files, writer, &state)
        }
        do {
            let result = transaction ? try await host.write(notify: true, body) : try await host.replace(body)
            state = box.current
            return result
        } catch {
            state = box.current
            throw error
        }
    }
}
