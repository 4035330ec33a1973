import FerryCore
import Foundation

/// What a store knows about one attachment: its name (the SHA-256 of its bytes), size, type, when it was first
/// stored and which tokens uploaded it (the SHA-256 hex of each bearer token, never the token; empty on a public
/// dataset uploaded without one). Kept beside the bytes as `<sha256>.json`.
///
/// ```swift
/// let info = try await store.info(dataset: "notes", sha256: sha256)
/// print(info?.size ?? 0, info?.contentType ?? "")
/// ```
public struct AttachmentInfo: Codable, Sendable, Equatable {
    /// The attachment's name: the SHA-256 of its bytes, 64 lowercase hex characters.
    public var sha256: String
    /// Its size in bytes.
    public var size: Int64
    /// The `Content-Type` it was uploaded with, served back on every GET.
    public var contentType: String
    /// When it was last uploaded (stored, or uploaded again while held): retention keeps an attachment no version
    /// names until `--attachment-grace` after this.
    public var uploadedAt: Date
    /// The SHA-256 hex of each bearer token that uploaded it, in the order first seen.
    public var uploaders: [String]

    public init(sha256: String, size: Int64, contentType: String, uploadedAt: Date, uploaders: [String] = []) {
        self.sha256 = sha256
        self.size = size
        self.contentType = contentType
        self.uploadedAt = uploadedAt
        self.uploaders = uploaders
    }

    /// The info as stored: JSON with sorted keys and `uploadedAt` as ISO-8601 UTC.
    public func encoded() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(Timestamp.format(date))
        }
        return try encoder.encode(self)
    }

    /// Reads what ``encoded()`` wrote.
    public static func decode(_ data: Data) throws -> AttachmentInfo {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let date = Timestamp.parse(text) else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: decoder.codingPath, debugDescription: "not an ISO-8601 timestamp: \(text)"))
            }
            return date
        }
        return try decoder.decode(AttachmentInfo.self, from: data)
    }
}

/// Where a server keeps attachments: content-addressed, one set per dataset, outside version retention. The
/// directory store is ``FileAttachmentStore``; a bucket keeps the same keys under its prefix
/// (`DATASET/attachments/<sha256>` and `<sha256>.json`).
///
/// The contract every implementation keeps:
/// - ``add(dataset:sha256:file:contentType:uploader:)`` is the only way in. It is handed a complete temp file whose
///   SHA-256 the caller has checked, and makes it visible under its name atomically and durably (temp, fsync,
///   rename): nothing half-written is ever visible under a SHA-256, and a crash at any instant leaves either no
///   attachment or a complete one. Adding one already held keeps the held bytes, merges the uploader into its list
///   and sets `uploadedAt` to now (an upload restarts the grace).
/// - ``info(dataset:sha256:)`` and ``file(dataset:sha256:)`` answer nil for an attachment not held.
/// - ``file(dataset:sha256:)`` is a local file the server can send with `sendfile` (a bucket store downloads it into
///   its cache first).
/// - ``delete(dataset:sha256:)`` of one not held is no error.
///
/// ```swift
/// let store: any AttachmentStore = FileAttachmentStore(root: storeURL)
/// let (info, created) = try await store.add(
///     dataset: "notes", sha256: sha256, file: verifiedTemp, contentType: "image/jpeg", uploader: nil)
/// ```
public protocol AttachmentStore: Sendable {
    /// What the store knows about attachment `sha256` of `dataset`, or nil when it does not hold it.
    func info(dataset: String, sha256: String) async throws -> AttachmentInfo?
    /// A local file with the attachment's bytes, or nil when it is not held.
    func file(dataset: String, sha256: String) async throws -> URL?
    /// Stores `file` (a verified temp file, consumed: moved or removed) as attachment `sha256`; returns its info and
    /// whether it was stored now (false: it was held already; `uploader` was merged into its uploaders and
    /// `uploadedAt` set to now).
    func add(dataset: String, sha256: String, file: URL, contentType: String, uploader: String?) async throws
        -> (info: AttachmentInfo, created: Bool)
    /// Every attachment of `dataset`, sorted by name.
    func list(dataset: String) async throws -> [AttachmentInfo]
    /// Deletes attachment `sha256` of `dataset` (its bytes first, then its info).
    func delete(dataset: String, sha256: String) async throws
}
