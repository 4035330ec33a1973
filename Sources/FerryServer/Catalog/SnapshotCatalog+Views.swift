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
        /// The versions served from files of the store (the checkpoints), by number.
        let versions: [Int: VersionEntry]
        /// The versions stored as steps, built whole only when a client asks for one whole (``VersionBuilds``).
        let steps: [Int: VersionBuilds.Request]
        let builds: VersionBuilds
        /// The patches to the retained versions, by their URL's versions.
        let patches: [PatchKey: VersionEntry]
        /// Every representation this view may read, by its content-addressed name (`/objects/{object}`): each
        /// checkpoint's SQLite file and gzip copy, and each patch.
        let objects: [ObjectName: VersionEntry.Representation]
        /// The catch-up patches this view makes on request (nil without a patch horizon).
        let catchUp: CatchUp?

        init(
            manifest: Manifest, scoped: Bool, versions: [Int: VersionEntry], steps: [Int: VersionBuilds.Request] = [:],
            builds: VersionBuilds, patches: [PatchKey: VersionEntry], catchUp: CatchUp? = nil
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
            self.versions = versions
            self.steps = steps
            self.builds = builds
            self.patches = patches
            var index: [ObjectName: VersionEntry.Representation] = [:]
            for entry in versions.values {
                for representation in entry.representations { index[representation.object] = representation }
            }
            for entry in patches.values { index[entry.identity.object] = entry.identity }
            objects = index
        }

        /// Version `number` ready to serve whole: a checkpoint, or a step version built on request already.
        func version(_ number: Int) -> VersionEntry? {
            versions[number] ?? steps[number].flatMap { builds.ready($0) }
        }

        /// The current version ready to serve whole (nil while a step version is not built).
        var latest: VersionEntry? { version(manifest.version) }

        /// Patch `key`: a stored one, or a catch-up patch already made.
        func patch(_ key: PatchKey) -> VersionEntry? { patches[key] ?? catchUp?.ready(key) }

        /// The representation named `object`: a checkpoint's file, a stored patch, a catch-up patch made, or a step
        /// version's file built on request.
        func object(_ object: ObjectName) -> VersionEntry.Representation? {
            objects[object] ?? catchUp?.representation(object) ?? builtObject(object)
        }

        /// The representation named `object` of one of this view's own step versions, once built: never another
        /// scope's, though a dataset's scopes share one build cache.
        private func builtObject(_ object: ObjectName) -> VersionEntry.Representation? {
            guard object.kind != .patch, let request = steps.values.first(where: { $0.record.sha256 == object.sha256 }),
                let entry = builds.ready(request)
            else { return nil }
            return entry.representations.first { $0.object == object }
        }

        /// Makes what `target` names when this view serves it on request: a step version's whole file
        /// (``VersionBuilds``), or a catch-up patch this view covers when it has no stored one. The caller then reads
        /// it with ``version(_:)`` or ``patch(_:)``. Throws `503` when the lane is full.
        func prepare(_ target: ReadTarget) async throws {
            switch target {
            case .snapshot, .version:
                let number: Int
                if case .version(let asked) = target { number = asked } else { number = manifest.version }
                guard versions[number] == nil, let request = steps[number] else { return }
                _ = try await builds.entry(for: request)
            case .patch(let key):
                guard patches[key] == nil, let catchUp, catchUp.covers(key) else { return }
                _ = try await catchUp.build(key)
            case .manifest, .object:
                return
            }
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
        /// A partitioned dataset's layout (docs/partitions.md): its scoped views are the shared stream and the
        /// partitions.
        var partitioning: PartitionLayout?
        /// Partitions that disappeared: `410 Gone`.
        var retiredPartitions: Set<String> = []
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
