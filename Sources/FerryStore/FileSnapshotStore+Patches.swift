import FerryCore
import Foundation

/// Patch objects: gzip-compressed changesets from an older version of a scope to a newer one, stored beside the
/// snapshots as `objects/<sha256>.patch.gz` and named in the newer version's record (`PublishedVersion.patches`).
extension FileSnapshotStore {
    /// Compresses `changeset`, and stores it as a patch from `from` (whose file's checksum is `base`) to `to` unless
    /// its compressed size reaches
    /// `limit` (a patch as large as the gzip copy saves nothing). The file is fsynced before its rename; it is
    /// garbage until a manifest names it. Call it while holding the lock. Returns nil when not worth storing.
    public func storePatch(dataset: String, changeset: Changeset, from: Int, base: String, to: Int, limit: Int64) throws
        -> PatchRef?
    {
        let tmp = temporaryDirectory(dataset: dataset)
        try DurableFile.makeDirectory(tmp)
        try DurableFile.makeDirectory(objectsDirectory(dataset: dataset))
        let raw = tmp.appendingPathComponent("patch-\(from)-\(to).changeset")
        let compressed = raw.appendingPathExtension("gz")
        defer {
            // Temp files of this call; a leftover is removed with tmp/ by the next publish.
            try? FileManager.default.removeItem(at: raw)
        }
        try DurableFile.write(changeset.data, to: raw)
        // Level 6: measured on a 5.9 MB changeset (1 % of 2M rows), level 9 took 2.1× the time (0.40 s against
        // 0.19 s) for a patch 0.5 % smaller.
        let size = try Gzip.compressFile(from: raw, to: compressed, level: 6)
        guard size < limit else {
            try DurableFile.remove(compressed)
            return nil
        }
        try DurableFile.sync(compressed)
        let sha256 = try FileDigest.sha256Hex(of: compressed)
        try DurableFile.rename(compressed, to: patchURL(dataset: dataset, sha256: sha256))
        return PatchRef(from: from, to: to, size: size, sha256: sha256, base: base)
    }

    /// The changeset of a stored patch, checked against its recorded checksum.
    public func loadPatch(dataset: String, _ patch: PatchRef) throws -> Changeset {
        let url = patchURL(dataset: dataset, sha256: patch.sha256)
        guard try FileDigest.sha256Hex(of: url) == patch.sha256 else {
            throw FerryError(.store, "patch \(patch.from)-\(patch.to) does not match its checksum", path: url.path)
        }
        let raw = temporaryDirectory(dataset: dataset).appendingPathComponent("load-\(patch.sha256).changeset")
        try DurableFile.makeDirectory(raw.deletingLastPathComponent())
        defer {
            // A temp file of this call; a leftover is removed with tmp/ by the next publish.
            try? FileManager.default.removeItem(at: raw)
        }
        try Gzip.decompressFile(from: url, to: raw)
        do {
            return Changeset(data: try Data(contentsOf: raw))
        } catch {
            throw FerryError(
                .io, "cannot read patch \(patch.from)-\(patch.to): \(error.localizedDescription)", path: url.path)
        }
    }
}
