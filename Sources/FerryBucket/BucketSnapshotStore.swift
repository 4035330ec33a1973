import FerryCore
import FerryS3
import FerryStore
import Foundation

/// A ``SnapshotStore`` over a bucket (`s3://BUCKET/PREFIX`), for `ferry serve`: every method answers from memory,
/// kept up to date by a ``BucketReplica``, which downloads each object a manifest names into a local cache, verifies
/// it, fsyncs and renames it into place, and only then exposes the manifest here. So ``files(of:in:)`` and
/// ``patchURL(dataset:sha256:)`` always name complete, verified local files, and the server's catalog and responders
/// serve them exactly as from a directory store.
///
/// ```
/// CACHE/DATASET/objects/<sha256>.sqlite | <sha256>.sqlite.gz | <sha256>.patch.gz   (the store's own layout)
/// CACHE/.tmp/                                                                      downloads in flight
/// ```
public final class BucketSnapshotStore: SnapshotStore {
    public let layout: BucketLayout
    /// The local cache the objects are downloaded into.
    public let cacheDirectory: URL
    let exposed = Locked<[String: Exposed]>([:])

    /// A dataset's manifest as served: its ETag (the revision) and content.
    struct Exposed: Sendable {
        var etag: String
        var manifest: StoredManifest
    }

    public init(layout: BucketLayout, cacheDirectory: URL) {
        self.layout = layout
        self.cacheDirectory = cacheDirectory.standardizedFileURL
    }

    public func datasets() throws -> [String] { exposed.withLock { $0.keys.sorted() } }

    /// The manifest object's ETag, as of the last manifest whose objects were all downloaded and verified.
    public func manifestRevision(dataset: String) -> StoreRevision? {
        exposed.withLock { $0[dataset] }.map { StoreRevision($0.etag) }
    }

    public func storedManifest(for dataset: String) throws -> StoredManifest? {
        exposed.withLock { $0[dataset] }?.manifest
    }

    public func files(of record: VersionRecord, in manifest: StoredManifest) -> SnapshotFiles {
        SnapshotFiles(
            snapshot: objectURL(dataset: manifest.dataset, name: "\(record.sha256).sqlite"),
            gzip: objectURL(dataset: manifest.dataset, name: "\(record.sha256).sqlite.gz"))
    }

    public func patchURL(dataset: String, sha256: String) -> URL {
        objectURL(dataset: dataset, name: "\(sha256).patch.gz")
    }

    /// `s3://BUCKET/PREFIX/DATASET/manifest.json`.
    public func manifestURL(dataset: String) -> URL {
        let text = "s3://\(layout.bucket)/\(layout.manifestKey(dataset: dataset))"
        return URL(string: text) ?? URL(fileURLWithPath: text)
    }

    /// The cached copy of object `name` (`<sha256>.sqlite`, …) of `dataset`.
    public func objectURL(dataset: String, name: String) -> URL {
        cacheDirectory.appendingPathComponent(dataset, isDirectory: true)
            .appendingPathComponent("objects", isDirectory: true).appendingPathComponent(name)
    }

    /// Serves `manifest` as `dataset`'s, from now on. Call it only after every object it names is in the cache.
    func expose(dataset: String, etag: String, manifest: StoredManifest) {
        exposed.withLock { $0[dataset] = Exposed(etag: etag, manifest: manifest) }
    }

    /// The served ETag of each dataset.
    func etags() -> [String: String] { exposed.withLock { $0.mapValues(\.etag) } }

    /// The cached files (`DATASET/objects/NAME`) the served manifests name.
    func referencedFiles() -> Set<String> {
        exposed.withLock { state in
            Set(
                state.values.flatMap { exposed in
                    Self.objectNames(of: exposed.manifest).map { "\(exposed.manifest.dataset)/objects/\($0.name)" }
                })
        }
    }

    /// One object a server needs in its cache, and what it must be.
    struct NeededObject: Sendable, Hashable {
        /// `<sha256>.sqlite`, `<sha256>.sqlite.gz` or `<sha256>.patch.gz`.
        var name: String
        var size: Int64
        /// The SHA-256 its bytes must have; nil for a gzip copy (the record carries only its size).
        var sha256: String?
    }

    /// What a server serves of a manifest: each retained checkpoint's snapshot and gzip copy, every other version's
    /// step (the server builds those versions, ``VersionBuilder``), and each patch (the publisher's `.rows` indexes
    /// are not served).
    static func objectNames(of manifest: StoredManifest) -> [NeededObject] {
        var needed: [String: NeededObject] = [:]
        for record in manifest.scopes.flatMap(\.chain) {
            if let step = record.step {
                needed["\(step.sha256).patch.gz"] = NeededObject(
                    name: "\(step.sha256).patch.gz", size: step.size, sha256: step.sha256)
            }
            if record.isCheckpoint {
                needed["\(record.sha256).sqlite"] = NeededObject(
                    name: "\(record.sha256).sqlite", size: record.size, sha256: record.sha256)
                needed["\(record.sha256).sqlite.gz"] = NeededObject(
                    name: "\(record.sha256).sqlite.gz", size: record.gzipSize, sha256: nil)
            }
            for patch in record.patches ?? [] {
                needed["\(patch.sha256).patch.gz"] = NeededObject(
                    name: "\(patch.sha256).patch.gz", size: patch.size, sha256: patch.sha256)
            }
        }
        return needed.keys.sorted().map { needed[$0]! }
    }
}
