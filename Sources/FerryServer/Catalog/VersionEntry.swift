import FerryCore
import FerryStore
import HTTPTypes
import Hummingbird

/// One retained version with its files held open and every header value precomputed, so answering a request
/// costs no file-system call. Immutable; shared between the catalog and the responses streaming it.
final class VersionEntry: Sendable {
    /// One encoding of the snapshot: the SQLite file itself or its stored gzip copy.
    struct Representation: Sendable {
        let file: OpenFile
        /// Strong entity tag including quotes: `"<sha256>"` for identity, `"<sha256>-gzip"` for gzip.
        let etag: String
        /// The opaque tag without quotes, for comparisons.
        let opaqueTag: Substring
        let size: Int64
        /// Headers of a 200 on the latest URL (`Cache-Control: no-cache`) and on the version URL (immutable),
        /// without Content-Length.
        let latestHeaders: HTTPFields
        let versionHeaders: HTTPFields
        /// Its content-addressed name, `/objects/{object}` (``ObjectName``).
        let object: ObjectName

        /// Headers of a 200 on its object URL: the version URL's, without `Vary` (the object URL names one
        /// representation, so the answer does not depend on `Accept-Encoding`). A `.sqlite.gz` object is a gzip
        /// file in its own right, `Content-Type: application/gzip` without `Content-Encoding`: a range of it is a
        /// slice of a file, which an HTTP library that decodes `Content-Encoding` would fail to inflate (found by
        /// the fuzzer). Ferry's nginx configuration labels it back as the version URL does (deploy/nginx/ferry.conf).
        let objectHeaders: HTTPFields
        /// The 304 fields of its object URL.
        let objectNotModified: HTTPFields

        /// Headers of a 304 on each URL: only what RFC 9110 §15.4.5 asks for (ETag, Cache-Control, Vary when the
        /// 200 has it); the server adds Date. Every layer sends exactly these (``ReadAnswer``).
        let latestNotModified: HTTPFields
        let versionNotModified: HTTPFields

        init(
            file: OpenFile, etag: String, opaqueTag: Substring, size: Int64, latestHeaders: HTTPFields,
            versionHeaders: HTTPFields,
            object: ObjectName
        ) {
            self.object = object
            self.file = file
            self.etag = etag
            self.opaqueTag = opaqueTag
            self.size = size
            self.latestHeaders = latestHeaders
            self.versionHeaders = versionHeaders
            latestNotModified = Self.notModified(latestHeaders)
            versionNotModified = Self.notModified(versionHeaders)
            var objectFields = versionHeaders
            objectFields[.vary] = nil
            if object.kind == .snapshotGzip {
                objectFields[.contentType] = "application/gzip"
                objectFields[.contentEncoding] = nil
            }
            objectHeaders = objectFields
            objectNotModified = Self.notModified(objectFields)
        }

        /// The fields of `headers` a 304 carries, in this order: ETag, Cache-Control, Vary.
        static func notModified(_ headers: HTTPFields) -> HTTPFields {
            var fields = HTTPFields()
            for name in [HTTPField.Name.eTag, .cacheControl, .vary] {
                if let value = headers[name] { fields[name] = value }
            }
            return fields
        }

        /// The 304 fields for the latest URL or a version URL.
        func notModifiedFields(latest: Bool) -> HTTPFields { latest ? latestNotModified : versionNotModified }
    }

    let dataset: String
    let version: Int
    let sha256: String
    let createdAt: String
    /// The version's record as the store wrote it (sizes, rows per table), for the status page.
    let record: VersionRecord
    let identity: Representation
    let gzip: Representation?
    /// Whether its files are objects of the store (a checkpoint, a stored patch), which a bucket can presign; false
    /// for a version this server built from steps and a catch-up patch it made (docs/delta.md).
    let inStore: Bool

    /// `scoped`: the snapshot belongs to one scope, so shared caches must not keep it (`Cache-Control: private`).
    init(
        dataset: String, record: VersionRecord, snapshot: OpenFile, gzipFile: OpenFile?, gzipSHA256: String?,
        scoped: Bool
    ) {
        self.dataset = dataset
        self.version = record.version
        self.sha256 = record.sha256
        self.createdAt = record.createdAt
        self.record = record
        inStore = record.isCheckpoint
        identity = Self.representation(
            file: snapshot, tag: record.sha256, digestHex: record.sha256, encoding: nil, version: record.version,
            scoped: scoped,
            object: ObjectName(sha256: record.sha256, kind: .snapshot))
        if let gzipFile, let gzipSHA256 {
            gzip = Self.representation(
                file: gzipFile, tag: record.sha256 + "-gzip", digestHex: gzipSHA256, encoding: "gzip",
                version: record.version, scoped: scoped, object: ObjectName(sha256: record.sha256, kind: .snapshotGzip))
        } else {
            gzip = nil
        }
    }

    /// An entry from ready-made representations (a patch: `VersionEntry+Patch.swift`).
    init(dataset: String, record: VersionRecord, sha256: String, identity: Representation, inStore: Bool = true) {
        self.inStore = inStore
        self.dataset = dataset
        self.version = record.version
        self.sha256 = sha256
        self.createdAt = record.createdAt
        self.record = record
        self.identity = identity
        gzip = nil
    }

    private static func representation(
        file: OpenFile, tag: String, digestHex: String, encoding: String?, version: Int, scoped: Bool,
        object: ObjectName
    ) -> Representation {
        var base = HTTPFields()
        base[.contentType] = "application/vnd.sqlite3"
        base[.eTag] = "\"\(tag)\""
        base[.ferryVersion] = String(version)
        if let digest = FileDigest.reprDigest(hex: digestHex) { base[.reprDigest] = digest }
        base[.acceptRanges] = "bytes"
        base[.vary] = "Accept-Encoding"
        if let encoding { base[.contentEncoding] = encoding }
        var latest = base
        latest[.cacheControl] = scoped ? CachePolicy.scopedLatest : CachePolicy.latest
        var pinned = base
        pinned[.cacheControl] = scoped ? CachePolicy.scopedVersion : CachePolicy.version
        let etag = "\"\(tag)\""
        return Representation(
            file: file, etag: etag, opaqueTag: Substring(tag), size: file.size, latestHeaders: latest,
            versionHeaders: pinned, object: object)
    }

    /// Every representation: the SQLite file, then its gzip copy when there is one.
    var representations: [Representation] { [identity] + (gzip.map { [$0] } ?? []) }

    /// The representation whose opaque tag equals `tag` (identity or gzip), if any.
    func representation(matchingOpaqueTag tag: Substring) -> Representation? {
        if tag == identity.opaqueTag { return identity }
        if let gzip, tag == gzip.opaqueTag { return gzip }
        return nil
    }
}

/// Cache-Control values of the snapshot routes.
enum CachePolicy {
    /// The latest snapshot changes with every publish: caches must revalidate every time.
    static let latest = "no-cache"
    /// A version URL never changes its bytes.
    static let version = "public, max-age=31536000, immutable"
    /// A scope's snapshots: only the token holder's own cache may keep them (RFC 9111 §5.2.2.7).
    static let scopedLatest = "private, no-cache"
    static let scopedVersion = "private, max-age=31536000, immutable"
}

extension HTTPField.Name {
    /// `Ferry-Version: <n>`: the version number of the snapshot in the response.
    static let ferryVersion = HTTPField.Name("Ferry-Version")!
    /// `Ferry-Object: <name>`: the object a version or patch URL would answer with (the object lookup).
    static let ferryObject = HTTPField.Name("Ferry-Object")!
    /// The object lookup's copy of the object's own `ETag`, `Cache-Control` and `Repr-Digest`, which a cache sends
    /// with the object whichever upstream filled it (a bucket sends its own ETag and none of the others).
    static let ferryObjectETag = HTTPField.Name("Ferry-Object-ETag")!
    static let ferryObjectCacheControl = HTTPField.Name("Ferry-Object-Cache-Control")!
    static let ferryObjectReprDigest = HTTPField.Name("Ferry-Object-Repr-Digest")!
    /// `Ferry-Object-URL: <url>`: where a cache may fetch the object itself (``ServerDependencies/objectURL``).
    static let ferryObjectURL = HTTPField.Name("Ferry-Object-URL")!
    /// RFC 9530 `Repr-Digest`.
    static let reprDigest = HTTPField.Name("Repr-Digest")!
}
