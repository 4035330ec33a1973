import FerryCore
import Foundation

/// What the server promised about the snapshot being downloaded: its checksum, size and version.
/// Stored in `.ferry/partial.json` so an interrupted download resumes with `Range` + `If-Range`.
struct ExpectedSnapshot: Codable, Equatable, Sendable {
    /// SHA-256 hex of the whole SQLite file (its identity ETag, the manifest's `sha256`).
    var sha256: String
    /// Size of the SQLite file in bytes, when known.
    var size: Int64?
    /// `Ferry-Version`, when the server said.
    var version: Int?
}

/// How a snapshot's bytes travel: the SQLite file itself, or the server's gzip copy, inflated as it arrives.
///
/// ```swift
/// if result.encoding == .gzip { print("\(result.bytesReceived) bytes on the wire for \(result.fileBytes ?? 0)") }
/// ```
public enum TransferEncoding: String, Codable, Sendable {
    case identity
    case gzip
}

/// Where a download's bytes come from and what they are on the wire. Stored in `.ferry/partial.json` with the
/// ``ExpectedSnapshot``, so a resume asks the same version for the same representation, validated by its ETag.
struct TransferSource: Codable, Equatable, Sendable {
    /// The immutable version URL the bytes came from (`…/versions/{n}`); a resume asks the configured server for
    /// the same version (the server may have moved), and `If-Range` makes sure the bytes are the same.
    var url: String
    /// The representation: the SQLite file or its gzip copy.
    var encoding: TransferEncoding
    /// Length of that representation in bytes (`Content-Length` of the 200, the total of a `Content-Range`).
    var size: Int64?
    /// Its strong ETag, as sent in `If-Range`: `"<sha256>"` or `"<sha256>-gzip"`.
    var etag: String

    /// The ETag of `sha256`'s representation in `encoding`.
    static func etag(sha256: String, encoding: TransferEncoding) -> String {
        encoding == .gzip ? "\"\(sha256)-gzip\"" : "\"\(sha256)\""
    }
}

/// The pure decision for one response head: what to do with the body. No I/O, unit-tested on its own.
enum ResponsePlan: Equatable {
    /// 304: the server's snapshot is one we have (or have rejected).
    case notModified
    /// 200: write the body from byte 0.
    case full(ExpectedSnapshot, TransferSource)
    /// 206 that continues the partial download exactly at `from` (a byte of the representation on the wire).
    case resume(from: Int64, ExpectedSnapshot, TransferSource)
    /// The server answered a range request inconsistently (416, a 206 starting elsewhere, another ETag or
    /// encoding): discard the partial download and ask again without `Range`.
    case restartFromZero(reason: String)

    /// Decides from the status and headers. `resumeFrom` is the byte the request asked for with `Range`, nil when it
    /// asked for the whole representation; `partial` and `source` are what the partial download was promised to
    /// become and where its bytes came from. `promised`, the manifest's word on this version, must agree with the
    /// response's checksum and version.
    static func decide(
        head: TransportResponseHead, resumeFrom: Int64?, partial: ExpectedSnapshot?, source: TransferSource? = nil,
        promised: ExpectedSnapshot? = nil, url: String
    ) throws -> ResponsePlan {
        switch head.status {
        case 304:
            return .notModified
        case 200:
            let (expected, source) = try full(from: head, promised: promised, url: url)
            return .full(expected, source)
        case 206:
            guard let resumeFrom, let partial else {
                return .restartFromZero(reason: "the server sent 206 Partial Content to a request without Range")
            }
            let source =
                source
                ?? TransferSource(
                    url: url, encoding: .identity, size: partial.size,
                    etag: TransferSource.etag(sha256: partial.sha256, encoding: .identity))
            let rangeHeader = head.header("Content-Range")
            guard let range = SnapshotHeaders.contentRange(rangeHeader) else {
                return .restartFromZero(
                    reason: "the server sent 206 with an unusable Content-Range '\(rangeHeader ?? "")'")
            }
            guard range.start == resumeFrom, range.end == range.total - 1 else {
                return .restartFromZero(
                    reason:
                        "the server sent bytes \(range.start)-\(range.end)/\(range.total) but the client asked from byte \(resumeFrom) to the end"
                )
            }
            if let size = source.size, size != range.total {
                return .restartFromZero(
                    reason: "the server's representation is \(range.total) bytes, the partial download expected \(size)"
                )
            }
            if let length = SnapshotHeaders.nonNegative(head.header("Content-Length")),
                length != range.end - range.start + 1
            {
                return .restartFromZero(
                    reason: "206 Content-Length \(length) does not match Content-Range \(rangeHeader ?? "")")
            }
            guard let encoding = SnapshotHeaders.contentEncoding(head.header("Content-Encoding")),
                encoding == source.encoding
            else {
                return .restartFromZero(
                    reason:
                        "the server sent 206 with Content-Encoding '\(head.header("Content-Encoding") ?? "identity")', the partial download is \(source.encoding.rawValue)"
                )
            }
            if let etag = head.header("ETag") {
                let tag = SnapshotHeaders.entityTag(etag)
                guard tag?.sha256 == partial.sha256, tag?.encoding == source.encoding else {
                    return .restartFromZero(
                        reason: "the server sent 206 for ETag \(etag), not the partial download's \(source.etag)")
                }
            }
            // Repr-Digest names the selected representation's bytes: the SQLite file's checksum only for identity.
            if source.encoding == .identity,
                let digest = try SnapshotHeaders.reprDigestSHA256(head.header("Repr-Digest")), digest != partial.sha256
            {
                return .restartFromZero(
                    reason: "the server sent 206 whose Repr-Digest is not the partial download's checksum")
            }
            var expected = partial
            var resumed = source
            resumed.size = range.total
            if source.encoding == .identity { expected.size = range.total }
            if expected.version == nil {
                expected.version = SnapshotHeaders.nonNegative(head.header("Ferry-Version")).map { Int($0) }
            }
            return .resume(from: resumeFrom, expected, resumed)
        case 416 where resumeFrom != nil:
            return .restartFromZero(reason: "the server answered 416 Range Not Satisfiable to bytes=\(resumeFrom!)-")
        default:
            throw failure(head, url: url)
        }
    }

    /// The error for `head`: a ``ServerAsksToWait`` when a busy or failing server (429, 500, 502, 503, 504) says
    /// when to come back (`Retry-After` in seconds), else ``failure(status:url:)``.
    static func failure(_ head: TransportResponseHead, url: String) -> any Error {
        let failure = failure(status: head.status, url: url)
        guard [429, 500, 502, 503, 504].contains(head.status),
            let text = head.headers.first(where: { $0.key.lowercased() == "retry-after" })?.value.trimmingCharacters(
                in: .whitespaces),
            let seconds = Int(text), seconds >= 0
        else { return failure }
        return ServerAsksToWait(seconds: seconds, failure: failure)
    }

    /// The error for a status no download can continue from.
    static func failure(status: Int, url: String) -> FerryError {
        switch status {
        case 401, 403:
            // The partial download, its record and the client's state stay as they are: with a valid token the next
            // fetch resumes where this one would have.
            return BearerAuthorization.refusal(status: status, url: url)
        case 404:
            return FerryError(
                .notFound,
                "the server has nothing at \(url) (HTTP 404): check Configuration.serverURL and Configuration.dataset and that the dataset has been published",
                key: "dataset")
        default:
            return FerryError(
                .network,
                "the server answered HTTP \(status) for \(url); the app keeps using database.db, try again later or check the server's log"
            )
        }
    }

    /// The file a 200 response promises (checksum, size, version) and its representation on the wire. Requires a
    /// checksum: without one nothing can be verified, and without an ETag nothing can be resumed. A gzip answer with
    /// no ETag at all (a proxy stripped it) takes the checksum the manifest promised for it.
    static func full(from head: TransportResponseHead, promised: ExpectedSnapshot?, url: String) throws -> (
        ExpectedSnapshot, TransferSource
    ) {
        guard let encoding = SnapshotHeaders.contentEncoding(head.header("Content-Encoding")) else {
            throw FerryError(
                .corruptTransfer,
                "the server sent Content-Encoding '\(head.header("Content-Encoding") ?? "")' although the client asked for gzip or identity; check a proxy in between",
                key: "Content-Encoding")
        }
        let sha256 = try checksum(of: head, encoding: encoding, promised: promised, url: url)
        let length = try number(head, "Content-Length")
        var version: Int?
        if let value = try number(head, "Ferry-Version") {
            guard value >= 1 else {
                throw FerryError(
                    .corruptTransfer, "the server sent a malformed Ferry-Version '\(value)'", key: "Ferry-Version")
            }
            version = Int(value)
        }
        if let promised {
            guard promised.sha256 == sha256 else {
                throw FerryError(
                    .corruptTransfer,
                    "\(url) sent the snapshot \(sha256) but the manifest promised \(promised.sha256) for it; check the server's store or a cache in between",
                    key: "ETag")
            }
            if let version, let promisedVersion = promised.version, version != promisedVersion {
                throw FerryError(
                    .corruptTransfer,
                    "\(url) sent version \(version) but the manifest promised version \(promisedVersion); check a cache in between",
                    key: "Ferry-Version")
            }
        }
        let expected = ExpectedSnapshot(
            sha256: sha256, size: encoding == .identity ? (length ?? promised?.size) : promised?.size,
            version: version ?? promised?.version)
        let source = TransferSource(
            url: url, encoding: encoding, size: length, etag: TransferSource.etag(sha256: sha256, encoding: encoding))
        return (expected, source)
    }

    /// A non-negative whole number header, nil when absent; a malformed one is a corrupt transfer.
    private static func number(_ head: TransportResponseHead, _ name: String) throws -> Int64? {
        guard let text = head.header(name) else { return nil }
        guard let value = SnapshotHeaders.nonNegative(text) else {
            throw FerryError(.corruptTransfer, "the server sent a malformed \(name) '\(text)'", key: name)
        }
        return value
    }

    /// The SHA-256 of the SQLite file a 200 response carries: from its ETag (and `Repr-Digest`, which must agree)
    /// for the file itself; from its `"<sha256>-gzip"` ETag, else the manifest's promise, for the gzip copy.
    private static func checksum(
        of head: TransportResponseHead, encoding: TransferEncoding, promised: ExpectedSnapshot?, url: String
    ) throws -> String {
        let tag = SnapshotHeaders.entityTag(head.header("ETag"))
        switch encoding {
        case .identity:
            if let tag, tag.encoding != .identity {
                throw FerryError(
                    .corruptTransfer,
                    "the server sent the gzip copy's ETag \(head.header("ETag") ?? "") without Content-Encoding: gzip; check a proxy in between",
                    key: "ETag")
            }
            let digest = try SnapshotHeaders.reprDigestSHA256(head.header("Repr-Digest"))
            if let tag, let digest, tag.sha256 != digest {
                throw FerryError(
                    .corruptTransfer,
                    "the server's ETag and Repr-Digest name different checksums; check the server or a proxy in between",
                    key: "ETag")
            }
            guard let checksum = tag?.sha256 ?? digest else {
                throw FerryError(
                    .corruptTransfer,
                    "\(url) answered without a strong SHA-256 ETag or Repr-Digest, so the download cannot be verified; is this a Ferry server?",
                    key: "ETag")
            }
            return checksum
        case .gzip:
            // Repr-Digest names the compressed bytes; the checksum of the SQLite file is in the ETag. A proxy that
            // strips ETag leaves the manifest's promise: the inflated bytes are checked against it all the same (a
            // download without a validator just cannot be resumed with If-Range; its partial restarts from zero).
            if tag == nil, let promised { return promised.sha256 }
            guard let tag, tag.encoding == .gzip else {
                throw FerryError(
                    .corruptTransfer,
                    "\(url) sent gzip without a strong \"<sha256>-gzip\" ETag (got \(head.header("ETag") ?? "none")), so it can be neither verified nor resumed; check a proxy in between",
                    key: "ETag")
            }
            return tag.sha256
        }
    }
}
