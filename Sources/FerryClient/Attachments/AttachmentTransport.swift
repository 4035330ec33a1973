import FerryCore
import Foundation

/// One request of an attachment upload (a `HEAD`, a tus `POST`, `PATCH` or `DELETE`): the method, the URL, the
/// headers, and the body as a byte range of a file, streamed from it.
///
/// ```swift
/// let patch = AttachmentRequest(
///     method: "PATCH", url: uploadURL, headers: ["Upload-Offset": "0"],
///     body: .init(file: photo, offset: 0, length: 4_194_304))
/// ```
public struct AttachmentRequest: Sendable, Equatable {
    /// Bytes `offset..<offset+length` of a file.
    public struct Body: Sendable, Equatable {
        public var file: URL
        public var offset: Int64
        public var length: Int64

        public init(file: URL, offset: Int64, length: Int64) {
            self.file = file
            self.offset = offset
            self.length = length
        }
    }

    public var method: String
    public var url: URL
    /// Header name → value, sent as given (plus `Content-Length` for the body).
    public var headers: [String: String]
    public var body: Body?

    public init(method: String, url: URL, headers: [String: String] = [:], body: Body? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// The answer to an ``AttachmentRequest``: its head, and the start of its body (an error's message).
///
/// ```swift
/// let offset = response.head.header("Upload-Offset").flatMap { Int64($0) }
/// ```
public struct AttachmentResponse: Sendable, Equatable {
    public var head: SnapshotResponseHead
    /// The body, at most 64 KiB of it.
    public var body: Data

    public init(head: SnapshotResponseHead, body: Data = Data()) {
        self.head = head
        self.body = body
    }

    /// The most of a body a transport keeps.
    public static let bodyLimit = 64 << 10
}

/// How the client sends attachment uploads (tus: `POST`, `HEAD`, `PATCH`): the one request method the upload needs
/// beyond ``SnapshotTransport``'s `GET`, which downloads them. ``URLSessionAttachmentTransport`` is the default;
/// FerryClientNIO has `HTTPAttachmentTransport` on AsyncHTTPClient.
///
/// Contract: send the request with the body's bytes streamed from the file (never the whole file in memory), and
/// return the response whatever its status. Throw a `FerryError` with code `.offline` when the server could not be
/// reached, `.network` when the exchange broke (the bytes that reached the server are kept there: the next upload
/// asks how many). Never put the `Authorization` header into an error or a log line.
///
/// ```swift
/// let response = try await transport.send(AttachmentRequest(method: "HEAD", url: attachmentURL))
/// ```
public protocol AttachmentTransport: Sendable {
    /// The largest body one request carries; a longer upload is sent in several `PATCH`es. Nil: no limit.
    var maxBodyBytes: Int64? { get }

    func send(_ request: AttachmentRequest) async throws -> AttachmentResponse
}

extension TransportFailure {
    /// Whether an upload that failed with `error` may succeed if sent again: the server could not be reached, or
    /// failed, and not for a certificate (the same request would be refused again).
    static func isWorthRetrying(_ error: FerryError) -> Bool {
        error.code == .offline || (error.code == .network && !isTLS(error))
    }
}

extension DeviceAttachments {
    /// Throws `FerryError.Code.badInput` unless `sha256` is an attachment's name.
    static func requireID(_ sha256: String) throws {
        guard Attachment.isID(sha256) else {
            throw FerryError(.badInput, "'\(sha256)' is not an attachment's SHA-256 (64 lowercase hex characters)")
        }
    }
}
