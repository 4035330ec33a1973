import FerryCore
import Foundation

/// A new device's start when the current version is stored as a step (docs/delta.md, "What a server does per
/// version"): the manifest names the newest checkpoint (`checkpoint`) and the publisher's patch from it to the current
/// version. The device downloads the checkpoint whole from its immutable URL (gzip, resumable, verified by its SHA-256
/// as any full download), then applies the patch to that file and verifies the result as after any patch (row counts,
/// content digest): two immutable objects any cache can hold, and no server builds the current file.
extension SnapshotDownloader {
    /// The checkpoint and the patch from it to the manifest's version, when the manifest names both for a schema
    /// version the app accepts.
    static func chooseCheckpoint(_ manifest: Manifest, accepted: Set<Int>?) -> (PublishedVersion, PatchRef)? {
        guard let checkpoint = manifest.checkpoint, checkpoint.schemaVersion == manifest.schemaVersion,
            accepted?.contains(manifest.schemaVersion) ?? true,
            let ref = manifest.current.patch(from: checkpoint.version), ref.base == checkpoint.sha256
        else { return nil }
        return (checkpoint, ref)
    }

    /// Downloads `checkpoint` whole, then `ref`, and applies it to the checkpoint's verified file, which becomes
    /// `.ferry/patched.sqlite`: verified as the manifest's version, ready to install. Nil when the server no longer
    /// has the checkpoint (404); a refused schema is answered as for a full download.
    func downloadFromCheckpoint(
        _ checkpoint: PublishedVersion, patch ref: PatchRef, manifest: Manifest,
        progress: (@Sendable (FetchProgress) -> Void)?
    ) async throws -> Outcome? {
        let promised = ExpectedSnapshot(sha256: checkpoint.sha256, size: checkpoint.size, version: checkpoint.version)
        guard let outcome = try await download(promised, line: manifest.dataset, progress: progress) else { return nil }
        guard case .downloaded(let start) = outcome else { return outcome }
        let (changeset, bytes, checked) = try await downloadPatch(ref, line: manifest.dataset, progress: progress)
        let target = manifest.current
        let scratch = directory.patched
        let directory = directory
        _ = try await BlockingWork.run {
            // The checkpoint's file is the patch's scratch from here on: the partial's record no longer describes it,
            // and a crash leaves a scratch file the next open removes.
            try DurableFile.rename(start.file, to: scratch)
            directory.discardPartial()
            return try PatchApplier.apply(
                to: scratch, copy: .clone, patch: changeset, expected: target, baseDigest: checkpoint.contentDigest)
        }
        var stats = start.stats
        stats.bytesReceived += bytes
        stats.fileBytes = FileIdentity.size(of: scratch)
        stats.publishedBytes = target.size
        let info = SnapshotInfo(
            sha256: target.sha256, version: target.version, schemaVersion: target.schemaVersion,
            dataset: start.info.dataset)
        return .downloaded(
            Verified(
                info: info, stats: stats, file: scratch, path: .patch(from: checked.from, to: checked.to),
                contentDigest: target.contentDigest))
    }
}
