import FerryCore
import FerryStore
import HTTPTypes
import NIOCore

/// What the catalog holds per dataset: its state, the views of its audiences, and its open files.
extension SnapshotCatalog {
    /// One audience's view of a dataset: everyone's for a public dataset, one scope's for a scoped one. A class:
    /// every request looks one up, and handing out a reference costs less than copying its fields.
    final class SnapshotView: Sendable {
        let manifest: Manifest
        let manifestBody: ByteBuffer
        /// The manifest's headers on a 200 (ETag `"<sha256>"` of the latest snapshot, Ferry-Version, Cache-Control)
        /// and on a 304 (ETag, Cache-Control).
        let manifestHeaders: HTTPFields
        let manifestNotModified: HTTPFields
        let latest: VersionEntry
        let versions: [Int: VersionEntry]
        /// The patches to the retained versions, by their URL's versions.
        let patches: [PatchKey: VersionEntry]
        /// Every representation this view may read, by its content-addressed name (`/objects/{object}`): each
        /// retained version's SQLite file and gzip copy, and each patch.
        let objects: [ObjectName: VersionEntry.Representation]
        /// The catch-up patches this view makes on request (nil without a patch horizon).
        let catchUp: CatchUp?

        init(
            manifest: Manifest, scoped: Bool, latest: VersionEntry, versions: [Int: VersionEntry],
            patches: [PatchKey: VersionEntry], catchUp: CatchUp? = nil
        ) throws {
            self.manifest = manifest
            self.catchUp = catchUp
            manifestBody = ByteBuffer(bytes: try manifest.jsonData())
            var headers = HTTPFields()
            headers[.eTag] = "\"\(manifest.sha256)\""
            headers[.ferryVersion] = String(manifest.version)
            headers[.cacheControl] = scoped ? CachePolicy.scopedLatest : CachePolicy.latest
            manifestHeaders = headers
            manifestNotModified = VersionEntry.Representation.notModified(headers)
            self.latest = latest
            self.versions = versions
            self.patches = patches
            var index: [ObjectName: VersionEntry.Representation] = [:]
            for entry in versions.values {
                for representation in entry.representations { index[representation.object] = representation }
            }
            for entry in patches.values { index[entry.identity.object] = entry.identity }
            objects = index
        }

        /// Patch `key`: a stored one, or a catch-up patch already made.
        func patch(_ key: PatchKey) -> VersionEntry? { patches[key] ?? catchUp?.ready(key) }

        /// The representation named `object`: a retained version's file, a stored patch, or a catch-up patch made.
        func object(_ object: ObjectName) -> VersionEntry.Representation? {
            objects[object] ?? catchUp?.representation(object)
        }

        /// Makes catch-up patch `key` when this view covers it and has neither it nor a stored one (the caller then
        /// reads it with ``patch(_:)``).
        func prepare(_ target: ReadTarget) async {
            guard case .patch(let key) = target, patches[key] == nil, let catchUp, catchUp.covers(key) else { return }
            _ = await catchUp.build(key)
        }

        /// The manifest's 304 fields when `If-None-Match` is `*` or names the latest snapshot's checksum; nil
        /// otherwise. Read by ``ReadAnswer/decide(_:in:dataset:method:headers:checksum:)``.
        func manifestNotModified(_ headers: HTTPFields) -> HTTPFields? {
            guard let value = headers[.ifNoneMatch], let condition = ConditionalHeaders.noneMatch(value[...]) else {
                return nil
            }
            switch condition {
            case .any: return manifestNotModified
            case .tags(let tags): return tags.contains { $0 == manifest.sha256 } ? manifestNotModified : nil
            }
        }
    }

    /// A snapshot file and its gzip copy, open, with the gzip copy's checksum: shared by every version entry that
    /// names the same file (scopes with identical content, unchanged scopes across reloads).
    struct OpenObject: Sendable {
        let snapshot: OpenFile
        let gzip: OpenFile?
        let gzipSHA256: String?
    }

    /// What the server knows about one dataset.
    struct DatasetState: Sendable {
        enum Access: Sendable {
            /// One snapshot for everyone.
            case everyone(SnapshotView)
            /// One snapshot per scope value; a request must prove its scope with a bearer token.
            case scoped([String: SnapshotView])
        }
        let access: Access
        let identity: StoreRevision
        /// The highest version number served, and when the dataset was last published (for gauges and logs).
        let lastVersion: Int
        let createdAt: String
        /// `createdAt` of the oldest snapshot any scope retains: tombstones younger than this must stay.
        let oldestRetainedCreatedAt: String?
        /// Open files by checksum, reused by the next reload.
        let objects: [String: OpenObject]
        /// Open patch files by checksum, reused by the next reload.
        var patchFiles: [String: OpenFile] = [:]
        /// When this schema line was retired (docs/schema-lines.md): its URLs answer `410 Gone`.
        var retiredAt: String?
        /// The patch history, for the status page (nil without a patch horizon).
        var history: StatusReport.History?

        /// The public view, nil for a scoped dataset.
        var everyone: SnapshotView? {
            if case .everyone(let view) = access { return view }
            return nil
        }

        var isScoped: Bool { everyone == nil }
    }
}
