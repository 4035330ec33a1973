import FerryCore
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The default ``HTTPTransport``: Foundation's `URLSession` (FoundationNetworking, on curl, on Linux), the body
/// streamed chunk by chunk from a data task's delegate; downloads, change uploads and attachments alike.
///
/// What it does like every transport: `Range` and `If-Range`, `If-None-Match`, `Authorization: Bearer`, redirects,
/// and failures classified from `URLError` codes (offline, TLS, timeout, cancelled).
/// What differs:
/// - **No gzip on the wire.** URLSession inflates a `Content-Encoding: gzip` body itself, on Apple platforms and in
///   FoundationNetworking alike, and neither lets a caller turn that off; the client must see the gzip copy's own
///   bytes to resume it and to check its size. So, as ``HTTPTransport``'s contract allows, a request for the gzip
///   copy goes out as `Accept-Encoding: identity`, and the server sends the SQLite file itself. Patches are gzip
///   files of their own (not an encoding), so row-level updates stay small.
/// - **A private CA** (``TrustedCertificates``) is checked by the session delegate's trust evaluation on Apple
///   platforms. FoundationNetworking offers no hook for it (no server-trust challenge, no per-session CA file), so on
///   Linux `init(trusting:)` throws; use FerryClientNIO's `AsyncHTTPClientTransport` there.
/// - Memory: on Apple platforms, past ``highWaterMark`` bytes received but not yet consumed, the data task is
///   suspended until the client catches up. FoundationNetworking cannot pause a transfer (its `suspend()` takes the
///   transfer off curl and `resume()` starts the request again from its first byte: `scripts/bench fetch` received
///   more bytes than the server announced), so on Linux the bytes the disk has not taken yet stay in memory.
///
/// ```swift
/// let client = try await FerryClient.open(configuration: config, logger: logger)   // URLSessionTransport()
/// let pinned = try URLSessionTransport(trusting: try TrustedCertificates(pemFile: caURL))   // Apple platforms
/// ```
public final class URLSessionTransport: HTTPTransport {
    /// The session; its delegate routes each task's events to the call that started it.
    let session: URLSession
    private let delegate: URLSessionTransportDelegate
    /// Bytes received but not yet consumed above which the task is suspended (it resumes below a quarter of it); nil
    /// where the platform cannot pause a transfer (FoundationNetworking).
    public let highWaterMark: Int?
    /// The largest body one request carries: URLSession takes a body whole, so an attachment goes in `PATCH`es of
    /// this many bytes (memory stays flat however big it is). Default 8 MiB.
    public let maxBodyBytes: Int64?

    /// A transport with its own session.
    /// - Parameters:
    ///   - configuration: the session's configuration; default `.ephemeral` (no cookies, no cache on disk). Its cache
    ///     is always turned off: the client revalidates itself, and a cache would hide a 304 or a changed body.
    ///   - requestTimeout: the longest the session waits for the server to connect or to send the next bytes
    ///     (`timeoutIntervalForRequest`). Default 60 s.
    ///   - resourceTimeout: the longest one whole exchange may take, body included (`timeoutIntervalForResource`).
    ///     Default 6 hours.
    ///   - ca: CA certificates to trust *instead of* the system's. Apple platforms only: on Linux this throws
    ///     `FerryError.Code.badInput` (FoundationNetworking cannot honour it; FerryClientNIO can).
    ///   - highWaterMark: see ``highWaterMark``. Default 4 MiB; ignored with FoundationNetworking.
    ///   - maxBodyBytes: see ``maxBodyBytes``; at least 64 KiB.
    public init(
        configuration: URLSessionConfiguration = .ephemeral, requestTimeout: Duration = .seconds(60),
        resourceTimeout: Duration = .seconds(6 * 3600),
        trusting ca: TrustedCertificates? = nil, highWaterMark: Int = 4 << 20, maxBodyBytes: Int64 = 8 << 20
    ) throws {
        self.maxBodyBytes = max(maxBodyBytes, 64 << 10)
        #if !canImport(Security)
            if let ca {
                throw FerryError(
                    .badInput,
                    "URLSessionTransport cannot trust a private CA on this platform: FoundationNetworking has no server-trust hook; use AsyncHTTPClientTransport from FerryClientNIO (makeHTTPClient(trusting:)) or add the CA to the system's trust store",
                    path: ca.pemFile.path)
            }
        #endif
        let configuration = configuration.copy() as? URLSessionConfiguration ?? configuration
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.timeoutIntervalForRequest = requestTimeout.inSeconds
        configuration.timeoutIntervalForResource = resourceTimeout.inSeconds
        #if canImport(FoundationNetworking)
            // See the type's doc: a suspended FoundationNetworking task restarts from byte 0 when resumed.
            self.highWaterMark = nil
        #else
            self.highWaterMark = max(highWaterMark, 64 << 10)
        #endif
        delegate = URLSessionTransportDelegate(trusting: ca)
        session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
    }

    deinit {
        // The session keeps its delegate until it is invalidated; tasks still running are allowed to end.
        session.finishTasksAndInvalidate()
    }

    /// The transport a client uses unless ``FerryClient/Configuration/transport`` names another: one session for the
    /// process, as `URLSession.shared` is, with the settings above.
    ///
    /// ```swift
    /// config.transport = URLSessionTransport.shared
    /// ```
    public static let shared: URLSessionTransport = {
        do {
            return try URLSessionTransport()
        } catch {
            // Only a CA makes init throw, and none is given here.
            preconditionFailure("URLSessionTransport() without a CA cannot fail: \(error)")
        }
    }()

    public func send<Result: Sendable>(
        _ request: TransportRequest,
        _ handle: (TransportResponseHead, TransportResponseBody) async throws -> Result
    ) async throws -> Result {
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method
        // A long-poll's server waits before its first byte: the request's timeout must outlast that wait.
        if let timeout = request.timeout {
            urlRequest.timeoutInterval = max(session.configuration.timeoutIntervalForRequest, timeout.inSeconds)
        }
        for (name, value) in request.headers.sorted(by: { $0.key < $1.key }) {
            urlRequest.setValue(value, forHTTPHeaderField: name)
        }
        // URLSession inflates gzip itself and cannot be told not to: ask for the file itself (see the type's doc).
        // Without the header (the manifest, read whole) the session asks for and inflates what it likes.
        if let accept = urlRequest.value(forHTTPHeaderField: "Accept-Encoding"), accept.lowercased() != "identity" {
            urlRequest.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        }
        switch request.body {
        case .data(let data)?: urlRequest.httpBody = data
        case .file(let file, let offset, let length)?:
            // At most ``maxBodyBytes``, read once per request off the cooperative threads.
            urlRequest.httpBody = try await BlockingWork.run { try Self.read(file, offset: offset, length: length) }
        case nil: break
        }
        return try await exchange(urlRequest, for: request.exchange, handle: handle)
    }

    /// Bytes `offset..<offset+length` of an attachment to upload.
    static func read(_ file: URL, offset: Int64, length: Int64) throws -> Data {
        guard let handle = FileHandle(forReadingAtPath: file.path) else {
            throw FerryError(.io, "cannot open the attachment to upload", path: file.path)
        }
        defer { try? handle.close() }  // read-only: closing cannot lose data
        do {
            try handle.seek(toOffset: UInt64(offset))
            let data = try handle.read(upToCount: Int(length)) ?? Data()
            guard data.count == length else {
                throw FerryError(.io, "the attachment is shorter than its queue entry says", path: file.path)
            }
            return data
        } catch let error as FerryError {
            throw error
        } catch {
            throw FerryError(
                .io, "cannot read the attachment to upload: \(error.localizedDescription)", path: file.path)
        }
    }

    /// Sends `request` and calls `handle` once with the response head and the streamed body; the task is cancelled
    /// when `handle` returns before the body ended or throws, and when the calling task is cancelled.
    /// A failure before the answer is a `FerryError` worded for `exchange` (see ``TransportFailure``).
    private func exchange<Result: Sendable>(
        _ request: URLRequest, for exchange: TransportFailure.Exchange,
        handle: (TransportResponseHead, TransportResponseBody) async throws -> Result
    ) async throws -> Result {
        let task = session.dataTask(with: request)
        let stream = URLSessionTaskStream(task: task, highWaterMark: highWaterMark)
        delegate.register(stream, for: task)
        defer {
            delegate.unregister(task)
            task.cancel()
        }
        let url = request.url?.absoluteString ?? "the server"
        return try await withTaskCancellationHandler {
            task.resume()
            let response: HTTPURLResponse
            do {
                response = try await stream.head()
            } catch {
                try Task.checkCancellation()
                throw Self.failure(error, url: url, tlsProblem: stream.tlsProblem, exchange: exchange)
            }
            var headers: [String: String] = [:]
            for (key, value) in response.allHeaderFields {
                guard let name = key as? String else { continue }
                let text = value as? String ?? "\(value)"
                headers[name.lowercased()] = headers[name.lowercased()].map { "\($0), \(text)" } ?? text
            }
            let head = TransportResponseHead(status: response.statusCode, headers: headers)
            let body = TransportResponseBody { try await stream.next() }
            return try await handle(head, body)
        } onCancel: {
            task.cancel()
        }
    }

    /// The `FerryError` for a task that ended before any response: TLS (from the delegate's own trust evaluation, else
    /// the `URLError` code), else offline with the reason in words (see ``TransportFailure``).
    static func failure(
        _ error: any Error, url: String, tlsProblem: TLSProblem?, exchange: TransportFailure.Exchange = .snapshot
    ) -> FerryError {
        let cause: any Error = tlsProblem.map { ClassifiedTransportFailure($0, cause: error) } ?? error
        return TransportFailure.error(cause, url: url, exchange: exchange)
    }
}
