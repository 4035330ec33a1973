import AsyncHTTPClient
import FerryClient
import FerryCore
import Foundation
import NIOCore
import NIOHTTP1

/// An ``HTTPTransport`` on AsyncHTTPClient (SwiftNIO, BoringSSL), streaming bodies chunk by chunk both ways (memory
/// stays flat, the gzip copy is handed over undecoded, an attachment goes up in one `PATCH` read from its file). FerryClient's default is ``URLSessionTransport``; this one is for
/// Linux, where it is faster than FoundationNetworking's URLSession and honours a private CA
/// (``TrustedCertificates``), which FoundationNetworking cannot.
///
/// Uses ``sharedClient`` unless a client is injected; an injected client belongs to the caller, who shuts it down,
/// and must not decompress (`configuration.decompression = .disabled`, as ``makeHTTPClient(connectTimeout:trusting:)``
/// does): the client asks for the gzip copy, inflates it itself and resumes it by its compressed bytes.
///
/// ```swift
/// config.transport = AsyncHTTPClientTransport()                    // AsyncHTTPClientTransport.sharedClient
/// let client = try await FerryClient.open(configuration: config, logger: logger)
/// ```
public struct AsyncHTTPClientTransport: HTTPTransport {
    public let client: HTTPClient
    /// Upper bound for one whole exchange, body included. A stalled transfer ends earlier through the HTTP client's
    /// read timeout (60 s with ``makeHTTPClient(connectTimeout:trusting:)``, 90 s with ``sharedClient``).
    ///
    /// A manifest long-poll (`FerryClient.Configuration.download.waitForChanges`) sends nothing for up to its wait, and
    /// AsyncHTTPClient has no per-request read timeout: give the client a read timeout above the wait
    /// (`makeHTTPClient(readTimeout:)`, as `ferry watch` does). A request's ``TransportRequest/timeout`` beyond
    /// ``deadline`` extends the deadline.
    public var deadline: TimeAmount

    public init(client: HTTPClient = AsyncHTTPClientTransport.sharedClient, deadline: TimeAmount = .hours(6)) {
        self.client = client
        self.deadline = deadline
    }

    /// The process-wide client of the default transport: `HTTPClient.shared`'s settings without its decompression
    /// (which would inflate the gzip copy behind the client's back and break resuming and size checks). Like
    /// `HTTPClient.shared`, it lives as long as the process and is never shut down.
    ///
    /// ```swift
    /// let transport = AsyncHTTPClientTransport(client: AsyncHTTPClientTransport.sharedClient)
    /// ```
    public static let sharedClient: HTTPClient = {
        var configuration = HTTPClient.Configuration.singletonConfiguration
        configuration.decompression = .disabled
        configuration.connectionPool.retryConnectionEstablishment = false
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    /// An `HTTPClient` configured for snapshot downloads (connect timeout, read timeout, no decompression), also used
    /// for change uploads. A refused connection or a failed TLS handshake is reported at once (connection setup is
    /// not retried); an unreachable host takes the connect timeout; a server that accepts and never answers, the
    /// read timeout.
    /// With `trusting`, `https://` servers are verified against those CA certificates *instead of* the system's trust
    /// store; without it, against the system's.
    /// The caller owns it: `try await client.shutdown()` when done. Throws a `FerryError` when BoringSSL refuses one of
    /// the CA certificates.
    ///
    /// ```swift
    /// let http = try AsyncHTTPClientTransport.makeHTTPClient(trusting: try TrustedCertificates(pemFile: caURL))
    /// // … use it, then:
    /// try await http.shutdown()
    /// ```
    public static func makeHTTPClient(
        connectTimeout: TimeAmount = .seconds(10), readTimeout: TimeAmount = .seconds(60),
        trusting ca: TrustedCertificates? = nil
    ) throws -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.timeout = .init(connect: connectTimeout, read: readTimeout)
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.decompression = .disabled
        configuration.redirectConfiguration = .follow(max: 5, allowCycles: false)
        if let ca { configuration.tlsConfiguration = try ca.tlsConfiguration() }
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    public func send<Result: Sendable>(
        _ request: TransportRequest,
        _ handle: (TransportResponseHead, TransportResponseBody) async throws -> Result
    ) async throws -> Result {
        var httpRequest = HTTPClientRequest(url: request.url.absoluteString)
        httpRequest.method = HTTPMethod(rawValue: request.method)
        for (name, value) in request.headers.sorted(by: { $0.key < $1.key }) {
            httpRequest.headers.add(name: name, value: value)
        }
        switch request.body {
        case .data(let data)?: httpRequest.body = .bytes(data)
        case .file(let file, let offset, let length)?:
            httpRequest.body = .stream(FileChunks(file: file, offset: offset, length: length), length: .known(length))
        case nil: break
        }
        let response: HTTPClientResponse
        do {
            // AsyncHTTPClient's deadline covers the whole exchange, body included, so it is generous.
            let longest = request.timeout.map { max(deadline, TimeAmount($0)) } ?? deadline
            response = try await client.execute(httpRequest, deadline: .now() + longest)
        } catch {
            throw NIOTransportFailure.error(error, url: request.url.absoluteString, exchange: request.exchange)
        }
        var iterator = response.body.makeAsyncIterator()
        let body = TransportResponseBody {
            guard let buffer = try await iterator.next() else { return nil }
            return Data(buffer.readableBytesView)
        }
        return try await handle(TransportResponseHead(response), body)
    }
}

/// A file's byte range as 1 MiB buffers, read off the cooperative threads: an attachment's upload body.
struct FileChunks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let file: URL
    let offset: Int64
    let length: Int64

    func makeAsyncIterator() -> Iterator { Iterator(self) }

    final class Iterator: AsyncIteratorProtocol {
        let chunks: FileChunks
        var handle: FileHandle?
        var remaining: Int64

        init(_ chunks: FileChunks) {
            self.chunks = chunks
            remaining = chunks.length
        }

        deinit { try? handle?.close() }  // read-only: closing cannot lose data

        func next() async throws -> ByteBuffer? {
            guard remaining > 0 else { return nil }
            let chunks = self.chunks
            let count = Int(Swift.min(remaining, 1 << 20))
            let opened = handle.map { FileHandleBox(handle: $0) }
            let (file, data) = try await BlockingWork.run { () throws -> (FileHandleBox, Data) in
                let file = try opened?.handle ?? chunks.open()
                return (FileHandleBox(handle: file), try file.read(upToCount: count) ?? Data())
            }
            handle = file.handle
            guard data.count == count else {
                throw FerryError(.io, "the attachment is shorter than its queue entry says", path: chunks.file.path)
            }
            remaining -= Int64(count)
            return ByteBuffer(bytes: data)
        }
    }

    /// The file, open at ``offset``. Blocking.
    func open() throws -> FileHandle {
        guard let handle = FileHandle(forReadingAtPath: file.path) else {
            throw FerryError(.io, "cannot open the attachment to upload", path: file.path)
        }
        try handle.seek(toOffset: UInt64(offset))
        return handle
    }
}

/// A file handle handed from the thread pool back to the iterator that owns it (used by one caller at a time).
struct FileHandleBox: @unchecked Sendable {
    let handle: FileHandle
}

extension TransportResponseHead {
    /// The status and headers of an AsyncHTTPClient response (names lowercased, repeated ones joined with ", ").
    init(_ response: HTTPClientResponse) {
        var headers: [String: String] = [:]
        for field in response.headers {
            let name = field.name.lowercased()
            headers[name] = headers[name].map { "\($0), \(field.value)" } ?? field.value
        }
        self.init(status: Int(response.status.code), headers: headers)
    }
}
