import Foundation

/// One HTTP GET for a snapshot: the URL and the request headers (conditional and range headers included).
///
/// ```swift
/// let request = SnapshotRequest(url: url, headers: ["If-None-Match": "\"\(sha)\""])
/// ```
public struct SnapshotRequest: Sendable, Equatable {
    public var url: URL
    /// Header name → value. Names are sent as given.
    public var headers: [String: String]
    /// The longest the server may take to start answering, when it is longer than the transport's usual timeout:
    /// set on a manifest long-poll (`Prefer: wait=N`), which the server holds for up to N seconds. Nil (default):
    /// the transport's own timeouts.
    public var timeout: Duration?

    public init(url: URL, headers: [String: String] = [:], timeout: Duration? = nil) {
        self.url = url
        self.headers = headers
        self.timeout = timeout
    }
}

/// The status line and headers of a response. Header names are lowercased; repeated headers are joined with ", ".
///
/// ```swift
/// let head = SnapshotResponseHead(status: 304, headers: ["etag": "\"…\""])
/// head.header("ETag")  // "\"…\""
/// ```
public struct SnapshotResponseHead: Sendable, Equatable {
    public var status: Int
    public var headers: [String: String]

    public init(status: Int, headers: [String: String]) {
        self.status = status
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { "\($0), \($1)" })
    }

    /// The value of header `name` (case-insensitive), if present.
    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// A response body as a sequence of byte chunks, consumed once, inside the transport's handler.
///
/// ```swift
/// for try await chunk in body { hasher.update(data: chunk) }
/// ```
public struct SnapshotResponseBody: AsyncSequence {
    public typealias Element = Data

    private let next: () async throws -> Data?

    /// Wraps a "next chunk" function; it returns nil at the end of the body and throws if the transfer breaks.
    public init(next: @escaping () async throws -> Data?) {
        self.next = next
    }

    /// An empty body.
    public static var empty: SnapshotResponseBody { SnapshotResponseBody { nil } }

    public func makeAsyncIterator() -> Iterator { Iterator(next: next) }

    public struct Iterator: AsyncIteratorProtocol {
        let next: () async throws -> Data?
        public mutating func next() async throws -> Data? { try await next() }
    }
}

/// How the client talks HTTP: one GET (the manifest with `If-None-Match`, a version with optional `Range`/`If-Range`),
/// the body streamed in chunks.
/// ``URLSessionTransport`` is the default; FerryClientNIO has one on AsyncHTTPClient; an app can plug in its own by
/// implementing this one method.
///
/// Contract:
/// - Throw a `FerryError` with code `FerryError.Code.offline` when the server cannot be reached at all.
/// - Call `handle` once with the response head (any status, 304 and errors included) and the body; the body is only
///   valid inside `handle`. Pass the body on exactly as it came: do not decompress it (the client asks for the gzip
///   copy with `Accept-Encoding: gzip`, inflates it itself and resumes it by its compressed bytes), and do not follow
///   ranges yourself. A transport that cannot hand over an undecoded body (URLSession decodes gzip on its own) may
///   send `Accept-Encoding: identity` instead: the server then sends the SQLite file itself, and all works
/// uncompressed.
/// - A body that ends early must throw from the body iterator rather than end quietly when the transport can tell.
///
/// ```swift
/// struct LoggingTransport: SnapshotTransport {
///     let inner: any SnapshotTransport
///     func get<R: Sendable>(_ request: SnapshotRequest,
///                           _ handle: (SnapshotResponseHead, SnapshotResponseBody) async throws -> R) async throws -> R {
///         print("GET", request.url)
///         return try await inner.get(request, handle)
///     }
/// }
/// ```
public protocol SnapshotTransport: Sendable {
    func get<Result: Sendable>(
        _ request: SnapshotRequest,
        _ handle: (SnapshotResponseHead, SnapshotResponseBody) async throws -> Result
    ) async throws -> Result
}
