import FerryCore

/// What the server promised about the snapshot being downloaded: its checksum, size and version.
/// Stored in `.ferry/partial.json` so an interrupted download resumes with `Range` + `If-Range`.
struct ExpectedSnapshot: Codable, Equatable, Sendable {
    /// SHA-256 hex of the whole file (the strong ETag).
    var sha256: String
    /// Size of the whole file in bytes, when the server said.
    var size: Int64?
    /// `Ferry-Version`, when the server said.
    var version: Int?
}

/// The pure decision for one response head: what to do with the body. No I/O, unit-tested on its own.
enum ResponsePlan: Equatable {
    /// 304: the server's snapshot is one we have (or have rejected).
    case notModified
    /// 200: write the body from byte 0.
    case full(ExpectedSnapshot)
    /// 206 that continues the partial file exactly at `from`.
    case resume(from: Int64, ExpectedSnapshot)
    /// The server answered a range request inconsistently (416, a 206 starting elsewhere, another ETag):
    /// discard the partial file and ask again without `Range`.
    case restartFromZero(reason: String)

    /// Decides from the status and headers. `resumeFrom` is the byte the request asked for with `Range`, nil
    /// when it asked for the whole file; `partial` is what the partial file was promised to become.
    static func decide(
        head: SnapshotResponseHead, resumeFrom: Int64?, partial: ExpectedSnapshot?, url: String
    ) throws -> ResponsePlan {
        switch head.status {
        case 304:
            return .notModified
        case 200:
            return .full(try expected(from: head, url: url))
        case 206:
            guard let resumeFrom, let partial else {
                return .restartFromZero(reason: "the server sent 206 Partial Content to a request without Range")
            }
            let rangeHeader = head.header("Content-Range")
            guard let range = SnapshotHeaders.contentRange(rangeHeader) else {
                return .restartFromZero(reason: "the server sent 206 with an unusable Content-Range '\(rangeHeader ?? "")'")
            }
            guard range.start == resumeFrom, range.end == range.total - 1 else {
                return .restartFromZero(
                    reason: "the server sent bytes \(range.start)-\(range.end)/\(range.total) but the client asked from byte \(resumeFrom) to the end")
            }
            if let size = partial.size, size != range.total {
                return .restartFromZero(reason: "the server's file is \(range.total) bytes, the partial download expected \(size)")
            }
            if let length = SnapshotHeaders.nonNegative(head.header("Content-Length")), length != range.end - range.start + 1 {
                return .restartFromZero(reason: "206 Content-Length \(length) does not match Content-Range \(rangeHeader ?? "")")
            }
            if let etag = head.header("ETag"), SnapshotHeaders.strongSHA256ETag(etag) != partial.sha256 {
                return .restartFromZero(reason: "the server sent 206 for ETag \(etag), not the partial download's \"\(partial.sha256)\"")
            }
            if let digest = try SnapshotHeaders.reprDigestSHA256(head.header("Repr-Digest")), digest != partial.sha256 {
                return .restartFromZero(reason: "the server sent 206 whose Repr-Digest is not the partial download's checksum")
            }
            var expected = partial
            expected.size = range.total
            if expected.version == nil { expected.version = SnapshotHeaders.nonNegative(head.header("Ferry-Version")).map { Int($0) } }
            return .resume(from: resumeFrom, expected)
        case 416 where resumeFrom != nil:
            return .restartFromZero(reason: "the server answered 416 Range Not Satisfiable to bytes=\(resumeFrom!)-")
        case 401, 403:
            // The partial download, its record and the client's state stay as they are: with a valid token the next
            // fetch resumes where this one would have.
            throw BearerAuthorization.refusal(status: head.status, url: url)
        case 404:
            throw FerryError(
                .notFound,
                "the server has no snapshot at \(url) (HTTP 404): check Configuration.serverURL and Configuration.dataset and that the dataset has been published",
                key: "dataset")
        default:
            throw FerryError(
                .network, "the server answered HTTP \(head.status) for \(url); the app keeps using database.db, try again later or check the server's log")
        }
    }

    /// The checksum, size and version a 200 response promises. Requires a checksum: without one nothing can be verified.
    static func expected(from head: SnapshotResponseHead, url: String) throws -> ExpectedSnapshot {
        if let encoding = head.header("Content-Encoding"), encoding.lowercased() != "identity" {
            throw FerryError(
                .corruptTransfer, "the server sent Content-Encoding '\(encoding)' although the client asked for identity; check a proxy in between", key: "Content-Encoding")
        }
        let etag = SnapshotHeaders.strongSHA256ETag(head.header("ETag"))
        let digest = try SnapshotHeaders.reprDigestSHA256(head.header("Repr-Digest"))
        if let etag, let digest, etag != digest {
            throw FerryError(
                .corruptTransfer, "the server's ETag and Repr-Digest name different checksums; check the server or a proxy in between", key: "ETag")
        }
        guard let sha256 = etag ?? digest else {
            throw FerryError(
                .corruptTransfer, "\(url) answered without a strong SHA-256 ETag or Repr-Digest, so the download cannot be verified; is this a Ferry server?", key: "ETag")
        }
        var size: Int64?
        if let lengthHeader = head.header("Content-Length") {
            guard let length = SnapshotHeaders.nonNegative(lengthHeader) else {
                throw FerryError(.corruptTransfer, "the server sent a malformed Content-Length '\(lengthHeader)'", key: "Content-Length")
            }
            size = length
        }
        var version: Int?
        if let versionHeader = head.header("Ferry-Version") {
            guard let v = SnapshotHeaders.nonNegative(versionHeader), v >= 1 else {
                throw FerryError(.corruptTransfer, "the server sent a malformed Ferry-Version '\(versionHeader)'", key: "Ferry-Version")
            }
            version = Int(v)
        }
        return ExpectedSnapshot(sha256: sha256, size: size, version: version)
    }
}
