import Crypto
import FerryCore
import Foundation

/// The patch path (docs/delta.md): when the device holds a version the manifest names a patch from, the patch is
/// downloaded from its immutable URL (`…/patches/{from}-{to}`), checked against the size and SHA-256 the manifest
/// names, and inflated; the client then applies it to a copy of its database.
extension SnapshotDownloader {
    /// The file a patch would apply to: `updated.db` when an update is pending (it is newer), else `database.db`.
    struct PatchBase: Sendable, Equatable {
        var file: URL
        var info: SnapshotInfo
        /// The content digest of the base's version, when the client recorded it as the version arrived.
        var contentDigest: String? = nil
    }

    /// A verified patch, ready to be applied.
    struct DownloadedPatch: Sendable {
        var ref: PatchRef
        var changeset: Changeset
        /// The version it leads to, as the manifest describes it.
        var target: PublishedVersion
        var base: PatchBase
        /// Bytes received over the network for it.
        var bytesReceived: Int64
        /// How it applies: a catch-up patch (not named by the manifest) by ``PatchApplier/Rule/catchUp``.
        var rule: PatchApplier.Rule = .strict
    }

    /// The most a patch may inflate to, as a multiple of its compressed size (a changeset of text compresses about
    /// 5×; this bounds a hostile one).
    static let patchInflationLimit: Int64 = 64

    /// The patch to take from `base` to the manifest's version, or nil to take the full download: the patch must
    /// start at the base's version and name the base's published checksum (scopes share version numbers), the base
    /// must be of the manifest's dataset exactly (a patch never crosses schema lines: moving to another line is a
    /// full download; a base without a recorded dataset is of the configured `dataset`, as before lines), the schema
    /// must be unchanged and accepted, and the patch must be smaller than the compressed full download.
    static func choosePatch(_ manifest: Manifest, base: PatchBase?, dataset: String, accepted: Set<Int>?) -> PatchRef? {
        guard let base, let version = base.info.version, version < manifest.version,
            base.info.schemaVersion == manifest.schemaVersion,
            (base.info.dataset ?? dataset) == manifest.dataset,
            accepted?.contains(manifest.schemaVersion) ?? true,
            let ref = manifest.current.patch(from: version), ref.to == manifest.version, ref.base == base.info.sha256
        else { return nil }
        let full = manifest.gzipSize > 0 ? manifest.gzipSize : manifest.size
        return ref.size < full ? ref : nil
    }

    /// A catch-up patch from `base` to the manifest's version, when the manifest names none from it but says the
    /// server makes one from the versions' history (`catchUpFrom`, docs/delta.md "Catching up"), under the same
    /// conditions as ``choosePatch(_:base:dataset:accepted:)``. Its size and SHA-256 are learned from the answer
    /// (`Content-Length`, the ETag): the returned ref names an empty `sha256` and, as `size`, the most it may be (the
    /// compressed full download).
    static func chooseCatchUp(_ manifest: Manifest, base: PatchBase?, dataset: String, accepted: Set<Int>?)
        -> PatchRef?
    {
        guard let base, let version = base.info.version, version < manifest.version,
            base.info.schemaVersion == manifest.schemaVersion,
            (base.info.dataset ?? dataset) == manifest.dataset,
            accepted?.contains(manifest.schemaVersion) ?? true,
            manifest.current.patch(from: version) == nil,
            let from = manifest.catchUpFrom, from <= version
        else { return nil }
        let full = manifest.gzipSize > 0 ? manifest.gzipSize : manifest.size
        return PatchRef(from: version, to: manifest.version, size: full, sha256: "", base: base.info.sha256)
    }

    /// `…/LINE/patches/FROM-TO`, `line` being the manifest's dataset.
    func patchURL(_ ref: PatchRef, line: String) -> URL {
        lineURL(line).appendingPathComponent("patches").appendingPathComponent("\(ref.from)-\(ref.to)")
    }

    /// Downloads `ref` (of schema line `line`) and checks its size and SHA-256 before inflating it. Patches are small
    /// (a fraction of the compressed snapshot) and are not resumed: an interrupted one is downloaded again.
    ///
    /// A catch-up ref (an empty `sha256`, ``chooseCatchUp(_:base:dataset:accepted:)``) learns its size and checksum
    /// from the answer's `Content-Length` and ETag, and must be smaller than the `size` it names (the full
    /// download). Returns the changeset, the bytes received and the ref as checked.
    func downloadPatch(_ ref: PatchRef, line: String, progress: (@Sendable (FetchProgress) -> Void)?) async throws -> (
        Changeset, Int64, PatchRef
    ) {
        let url = patchURL(ref, line: line)
        let headers = try await requestHeaders(["Accept-Encoding": "identity"])
        let (compressed, ref): (Data, PatchRef) = try await transport.send(TransportRequest(url: url, headers: headers))
        {
            head, body in
            if head.status == 410 { throw await SchemaRetired.error(dataset: dataset, url: url, body: body) }
            guard head.status == 200 else { throw ResponsePlan.failure(head, url: url.absoluteString) }
            let ref = try ref.sha256.isEmpty ? Self.learnCatchUp(ref, from: head, url: url) : ref
            var data = Data()
            data.reserveCapacity(Int(ref.size))
            progress?(FetchProgress(bytesReceived: 0, totalBytes: ref.size, resumedFrom: 0, isPatch: true))
            do {
                for try await chunk in body {
                    guard Int64(data.count + chunk.count) <= ref.size else {
                        throw FerryError(
                            .corruptTransfer,
                            "the patch at \(url.absoluteString) is longer than the \(ref.size) bytes the manifest names"
                        )
                    }
                    data.append(chunk)
                    progress?(
                        FetchProgress(
                            bytesReceived: Int64(data.count), totalBytes: ref.size, resumedFrom: 0, isPatch: true))
                }
            } catch let error as FerryError {
                throw error
            } catch {
                throw FerryError(
                    .offline,
                    "the patch download from \(url.absoluteString) broke off after \(data.count) of \(ref.size) bytes (\(error)); database.db is unchanged"
                )
            }
            return (data, ref)
        }
        guard Int64(compressed.count) == ref.size else {
            throw FerryError(
                .corruptTransfer,
                "the patch at \(url.absoluteString) ended after \(compressed.count) of \(ref.size) bytes; database.db is unchanged"
            )
        }
        let sha256 = SHA256.hash(data: compressed).map { String(format: "%02x", $0) }.joined()
        guard sha256 == ref.sha256 else {
            throw FerryError(
                .corruptTransfer,
                "the patch at \(url.absoluteString) does not match its checksum (sha256 \(sha256), the manifest names \(ref.sha256)); database.db is unchanged"
            )
        }
        return (
            try Self.inflate(compressed, limit: ref.size * Self.patchInflationLimit, url: url), Int64(compressed.count),
            ref
        )
    }

    /// The size and checksum of a catch-up patch, from its answer's `Content-Length` and strong ETag `"<sha256>"`;
    /// an answer without them, or not smaller than the full download, is refused.
    static func learnCatchUp(_ ref: PatchRef, from head: TransportResponseHead, url: URL) throws -> PatchRef {
        let tag = head.header("ETag").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) } ?? ""
        guard let length = head.header("Content-Length").flatMap({ Int64($0) }), length >= 0, length < ref.size,
            tag.count == 64, tag.allSatisfy({ $0.isHexDigit && !$0.isUppercase })
        else {
            throw FerryError(
                .corruptTransfer,
                "the catch-up patch at \(url.absoluteString) names no size and checksum, or is not smaller than the full download; database.db is unchanged"
            )
        }
        return PatchRef(from: ref.from, to: ref.to, size: length, sha256: tag, base: ref.base)
    }

    private static func inflate(_ compressed: Data, limit: Int64, url: URL) throws -> Changeset {
        let inflater = try GzipInflater()
        var raw = Data()
        do {
            try inflater.inflate(compressed) { piece in
                guard Int64(raw.count + piece.count) <= limit else {
                    throw FerryError(.verification, "the patch inflates to more than \(limit) bytes")
                }
                raw.append(contentsOf: piece)
            }
            try inflater.finish()
        } catch let error as FerryError {
            throw FerryError(
                .corruptTransfer, "the patch at \(url.absoluteString) cannot be inflated: \(error.message)")
        }
        return Changeset(data: raw)
    }
}
