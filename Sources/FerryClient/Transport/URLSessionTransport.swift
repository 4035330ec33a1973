import FerryCore
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The default ``SnapshotTransport``: Foundation's `URLSession` (FoundationNetworking, on curl, on Linux), the body
/// streamed chunk by chunk from a data task's delegate. Also the session of the default change uploader
/// (``URLSessionChangeUploader``).
///
/// What it does like every transport: `Range` and `If-Range`, `If-None-Match`, `Authorization: Bearer`, redirects,
/// and failures classified from `URLError` codes (offline, TLS, timeout, cancelled).
/// What differs:
/// - **No gzip on the wire.** URLSession inflates a `Content-Encoding: gzip` body itself, on Apple platforms and in
///   FoundationNetworking alike, and neither lets a caller turn that off; the client must see the gzip copy's own
///   bytes to resume it and to check its size. So, as ``SnapshotTransport``'s contract allows, a request for the gzip
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
public final class URLSessionTransport: SnapshotTransport {
    /// The session; its delegate routes each task's events to the call that started it.
    let session: URLSession
    private let delegate: URLSessionTransportDelegate
    /// Bytes received but not yet consumed above which the task is suspended (it resumes below a quarter of it); nil
    /// where the platform cannot pause a transfer (FoundationNetworking).
    public let highWaterMark: Int?

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
    public init(
        configuration: URLSessionConfiguration = .ephemeral, requestTimeout: Duration = .seconds(60),
        resourceTimeout: Duration = .seconds(6 * 3600),
        trusting ca: TrustedCertificates? = nil, highWaterMark: Int = 4 << 20
    ) throws {
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
        configuration.timeoutIntervalForRequest = Self.seconds(requestTimeout)
        configuration.timeoutIntervalForResource = Self.seconds(resourceTimeout)
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

    /// The transport ``FerryClient/open(configuration:logger:transport:)`` uses unless given another: one session for
    /// the process, as `URLSession.shared` is, with the settings above.
    ///
    /// ```swift
    /// let client = try await FerryClient.open(configuration: config, logger: logger, transport: URLSessionTransport.shared)
    /// ```
    public static let shared: URLSessionTransport = {
        do {
            return try URLSessionTransport()
        } catch {
            // Only a CA makes init throw, and none is given here.
            preconditionFailure("URLSessionTransport() without a CA cannot fail: \(error)")
        }
    }()

    static func seconds(_ duration: Duration) -> TimeInterval {
        let (seconds, attoseconds) = duration.components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }

    public func get<Result: Sendable>(
        _ request: SnapshotRequest,
        _ handle: (SnapshotResponseHead, SnapshotResponseBody) async throws -> Result
    ) async throws -> Result {
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = "GET"
        // A long-poll's server waits before its first byte: the request's timeout must outlast that wait.
        if let timeout = request.timeout {
            urlRequest.timeoutInterval = max(session.configuration.timeoutIntervalForRequest, Self.seconds(timeout))
        }
        for (name, value) in request.headers.sorted(by: { $0.key < $1.key }) {
            urlRequest.setValue(value, forHTTPHeaderField: name)
        }
        // URLSession inflates gzip itself and cannot be told not to: ask for the file itself (see the type's doc).
        // Without the header (the manifest, read whole) the session asks for and inflates what it likes.
        if let accept = urlRequest.value(forHTTPHeaderField: "Accept-Encoding"), accept.lowercased() != "identity" {
            urlRequest.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        }
        return try await exchange(urlRequest, handle: handle)
    }

    /// Sends `request` and calls `handle` once with the response head and the streamed body; the task is cancelled
    /// when `handle` returns before the body ended or throws, and when the calling task is cancelled.
    /// A failure before the answer is a `FerryError` worded for `exchange` (see ``TransportFailure``).
    func exchange<Result: Sendable>(
        _ request: URLRequest, for exchange: TransportFailure.Exchange = .snapshot,
        handle: (SnapshotResponseHead, SnapshotResponseBody) async throws -> Result
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
            let head = SnapshotResponseHead(status: response.statusCode, headers: headers)
            let body = SnapshotResponseBody { try await stream.next() }
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
