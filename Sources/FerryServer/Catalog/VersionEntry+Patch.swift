import FerryCore
import FerryStore
import HTTPTypes
import Hummingbird

extension VersionEntry {
    /// A patch to version `record`, served like a version (the same conditional, range and caching rules) from
    /// its one representation: the compressed changeset as stored, `Content-Type: application/gzip`, whose
    /// SHA-256 is its strong ETag and its `Repr-Digest`. Immutable: its URL names both versions.
    static func patch(
        dataset: String, _ patch: PatchRef, to record: VersionRecord, file: OpenFile, scoped: Bool,
        inStore: Bool = true
    ) -> VersionEntry {
        var fields = HTTPFields()
        fields[.contentType] = "application/gzip"
        fields[.eTag] = "\"\(patch.sha256)\""
        fields[.ferryVersion] = String(patch.to)
        if let digest = FileDigest.reprDigest(hex: patch.sha256) { fields[.reprDigest] = digest }
        fields[.acceptRanges] = "bytes"
        fields[.cacheControl] = scoped ? CachePolicy.scopedVersion : CachePolicy.version
        let identity = Representation(
            file: file, etag: "\"\(patch.sha256)\"", opaqueTag: Substring(patch.sha256), size: file.size,
            latestHeaders: fields,
            versionHeaders: fields, object: ObjectName(sha256: patch.sha256, kind: .patch))
        return VersionEntry(
            dataset: dataset, record: record, sha256: patch.sha256, identity: identity, inStore: inStore)
    }
}

/// The versions a patch leads from and to: `/patches/{from}-{to}`.
struct PatchKey: Hashable, Sendable {
    let from: Int
    let to: Int

    /// `3-7`: two canonical positive version numbers, the first smaller.
    init?(_ text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, let from = SnapshotResponder.versionNumber(String(parts[0])),
            let to = SnapshotResponder.versionNumber(String(parts[1])), from < to
        else { return nil }
        self.from = from
        self.to = to
    }

    init(from: Int, to: Int) {
        self.from = from
        self.to = to
    }
}
