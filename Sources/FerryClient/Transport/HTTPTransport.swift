import FerryCore
import Foundation

/// One HTTP request of the client: a manifest, version, patch or attachment `GET` (conditional and range headers
/// included), a change upload's `POST`, an attachment upload's `HEAD`, `POST` or `PATCH`.
///
/// ```swift
/// let request = TransportRequest(url: url, headers: ["If-None-Match": "\"\(sha)\""])
/// let patch = TransportRequest(method: "PATCH", url: upload, body: .file(photo, offset: 0, length: 4_194_304))
/// ```
public struct TransportRequest: Sendable, Equatable {
    /// A request's body.
    public enum Body: Sendable, Equatable {
        /// Bytes in memory (a change batch's JSON).
        case data(Data)
        /// Bytes `offset..<offset+length` of a file, streamed from it (an attachment).
        case file(URL, offset: Int64, length: Int64)

        /// Its length in bytes.
        public var length: Int64 {
            switch self {
            case .data(let data): Int64(data.count)
            case .file(_, _, let length): length
            }
        }
    }

    public var method: String
    public var url: URL
    /// Header name → value. Names are sent as given.
    public var headers: [String: String]
    public var body: Body?
    /// The longest the server may take to start answering, when it is longer than the transport's usual timeout:
    /// set on a manifest long-poll (`Prefer: wait=N`), which the server holds for up to N seconds. Nil (default):
    /// the transport's own timeouts.
    public var timeout: Duration?

    public init(
        method: String = "GET", url: URL, headers: [String: String] = [:], body: Body? = nil, timeout: Duration? = nil
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
    }

    /// What a failure of this request leaves as it was, for `TransportFailure`: a `GET` reads, anything else
    /// uploads.
    package var exchange: TransportFailure.Exchange { method == "GET" ? .snapshot : .upload }
}

/// The status line and headers of a response. Header names are lowercased; repeated headers are joined with ", ".
///
/// ```swift
/// let head = TransportResponseHead(status: 304, headers: ["etag": "\"…\""])
/// head.header("ETag")  // "\"…\""
/// ```
public struct TransportResponseHead: Sendable, Equatable {
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
public struct TransportResponseBody: AsyncSequence {
    public typealias Element = Data

    private let next: () async throws -> Data?

    /// Wraps a "next chunk" function; it returns nil at the end of the body and throws if the transfer breaks.
    public init(next: @escaping () async throws -> Data?) {
        self.next = next
    }

    /// An empty body.
    public static var empty: TransportResponseBody { TransportResponseBody { nil } }

    public func makeAsyncIterator() -> Iterator { Iterator(next: next) }

    public struct Iterator: AsyncIteratorProtocol {
        let next: () async throws -> Data?
        public mutating func next() async throws -> Data? { try await next() }
    }
}

/// How the client talks HTTP, for everything it sends: manifests, versions, patches and attachments downloaded, edits
/// and attachments uploaded. ``URLSessionTransport`` is the default; FerryClientNIO has `AsyncHTTPClientTransport`;
/// an app can plug in its own by implementing ``send(_:_:)``. A client's transport is set once
/// (``FerryClient/Configuration/transport``), so a private CA, the timeouts and the connection pool are set in one
/// place.
///
/// Contract:
/// - Throw a `FerryError` with code `FerryError.Code.offline` when the server cannot be reached at all.
/// - Send the body streamed from its file (never a whole attachment in memory); at most ``maxBodyBytes`` are asked
///   for at once.
/// - Call `handle` once with the response head (any status, 304 and errors included) and the body; the body is only
///   valid inside `handle`. Pass the body on exactly as it came: do not decompress it (the client asks for the gzip
///   copy with `Accept-Encoding: gzip`, inflates it itself and resumes it by its compressed bytes), and do not follow
///   ranges yourself. A transport that cannot hand over an undecoded body (URLSession decodes gzip on its own) may
///   send `Accept-Encoding: identity` instead: the server then sends the SQLite file itself, and all works
///   uncompressed.
/// - A body that ends early must throw from the body iterator rather than end quietly when the transport can tell.
/// - Never put the `Authorization` header into an error or a log line.
///
/// ```swift
/// struct LoggingTransport: HTTPTransport {
///     let inner: any HTTPTransport
///     func send<R: Sendable>(_ request: TransportRequest,
///                            _ handle: (TransportResponseHead, TransportResponseBody) async throws -> R) async throws -> R {
///         print(request.method, request.url)
///         return try await inner.send(request, handle)
///     }
/// }
/// ```
public protocol HTTPTransport: Sendable {
    /// The largest body one request carries; a longer attachment upload is sent in several `PATCH`es. Nil: no limit.
    var maxBodyBytes: Int64? { get }

    func send<Result: Sendable>(
        _ request: TransportRequest,
        _ handle: (TransportResponseHead, TransportResponseBody) async throws -> Result
    ) async throws -> Result
}

extension HTTPTransport {
    public var maxBodyBytes: Int64? { nil }

    /// Sends `request` and returns the head and at most `limit` bytes of the body (an answer's JSON, an error's
    /// message); `over` is thrown when the body is longer, else the rest is dropped.
    package func collect(_ request: TransportRequest, limit: Int, over: FerryError? = nil) async throws
        -> (head: TransportResponseHead, body: Data)
    {
        try await send(request) { head, body in
            var data = Data()
            do {
                for try await chunk in body {
                    if data.count + chunk.count > limit, let over { throw over }
                    data.append(chunk.prefix(limit - data.count))
                    if data.count >= limit { break }
                }
            } catch let error as FerryError {
                throw error
            } catch {
                throw TransportFailure.error(
                    error, url: request.url.absoluteString, exchange: request.exchange, answerBegan: true)
            }
            return (head, data)
        }
    }
}
