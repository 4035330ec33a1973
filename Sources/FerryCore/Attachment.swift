import Foundation

/// Attachments: files (a photo, a scan, a signature) that rows name by the SHA-256 of their bytes.
///
/// A template names the columns that hold one (`attachments:` on a table); the value is 64 lowercase hex
/// characters, or NULL. The bytes travel beside the rows: a device uploads them before any edit that names them,
/// and the server serves them at `/v1/datasets/{dataset}/attachments/{sha256}`, immutable.
///
/// ```swift
/// Attachment.isID("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")   // true
/// Attachment.isID("photo.jpg")                                                          // false
/// ```
public enum Attachment {
    /// Whether `text` is an attachment's name: a SHA-256 in 64 lowercase hex characters.
    public static func isID(_ text: String) -> Bool {
        let bytes = text.utf8
        return bytes.count == 64 && bytes.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    /// When a device downloads an attachment its rows name.
    public enum Download: String, Sendable, Equatable, Codable, CaseIterable {
        /// At every fetch that names it: the default, for what the app shows at once.
        case eager
        /// Only when the app asks for it (``AttachmentColumn``); kept in a byte-capped LRU cache.
        case onDemand = "on-demand"
    }
}

extension Attachment {
    /// The resumable upload's wire, as the server and the device both speak it: tus 1.0.0 with the creation,
    /// expiration and termination extensions (https://tus.io/protocols/resumable-upload; docs/http-api.md).
    ///
    /// ```swift
    /// request.headers[Attachment.Tus.resumable] = Attachment.Tus.version
    /// ```
    public enum Tus {
        /// The protocol version, sent in `Tus-Resumable` by both sides.
        public static let version = "1.0.0"
        /// `Tus-Extension`: what the server speaks beyond the core.
        public static let extensions = "creation,expiration,termination"
        /// A `PATCH` body's `Content-Type`.
        public static let patchContentType = "application/offset+octet-stream"
        /// The header names.
        public static let resumable = "Tus-Resumable", versionHeader = "Tus-Version", extensionHeader = "Tus-Extension"
        public static let maxSize = "Tus-Max-Size", uploadLength = "Upload-Length", uploadOffset = "Upload-Offset"
        public static let uploadMetadata = "Upload-Metadata", uploadExpires = "Upload-Expires"
    }
}

/// A column that names attachments: its table, its name, and when devices download what it names.
///
/// ```swift
/// AttachmentColumn(table: "photos", column: "image", download: .eager)
/// ```
public struct AttachmentColumn: Sendable, Equatable, Hashable, Codable {
    /// The SQLite table.
    public var table: String
    /// The SQLite column holding the SHA-256, or NULL.
    public var column: String
    /// When a device downloads the attachment.
    public var download: Attachment.Download

    public init(table: String, column: String, download: Attachment.Download = .eager) {
        self.table = table
        self.column = column
        self.download = download
    }

}
