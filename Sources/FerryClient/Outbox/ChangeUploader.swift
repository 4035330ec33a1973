import AsyncHTTPClient
import NIOCore
import FerryCore
import Foundation
import NIOHTTP1

/// Uploads a batch of local edits and returns the server's answers. An app can plug in its own transport
/// (URLSession, say); ``HTTPChangeUploader`` is the AsyncHTTPClient one.
///
/// Contract: send `accessToken`, when there is one, as `Authorization: Bearer <token>`. Return only when the server
/// answered 200 with a well-formed body; throw a ``FerryError`` with code `.offline` when the server could not be
/// reached, `.network` when it failed (the edits stay queued and are retried), `.unauthorized` on a 401 or 403 (the
/// edits stay queued and are sent again, same change ids, once the app has a valid token; not retried meanwhile), and
/// `.badInput` when it refused the request itself (another 4xx: retrying the same batch will not help).
/// Never put the token into an error or a log line.
///
/// ```swift
/// let results = try await uploader.upload(batch, dataset: "trips", accessToken: token)
/// ```
public protocol ChangeUploader: Sendable {
    func upload(_ batch: ChangeBatch, dataset: String, accessToken: String?) async throws -> ChangeResults
}

extension ChangeUploader {
    /// Uploads without an access token (a public dataset).
    ///
    /// ```swift
    /// let results = try await HTTPChangeUploader(server: url).upload(batch, dataset: "trips")
    /// ```
    public func upload(_ batch: ChangeBatch, dataset: String) async throws -> ChangeResults {
        try await upload(batch, dataset: dataset, accessToken: nil)
    }
}

/// `POST {server}/v1/datasets/{dataset}/changes` over AsyncHTTPClient.
///
/// ```swift
/// let uploader = HTTPChangeUploader(server: URL(string: "http://127.0.0.1:8080")!)
/// let results = try await uploader.upload(batch, dataset: "trips")
/// ```
public struct HTTPChangeUploader: ChangeUploader {
    public var server: URL
    public var httpClient: HTTPClient
    public var timeout: TimeAmount
    /// Extra request headers. The access token goes through `upload(_:dataset:accessToken:)`, not here.
    public var headers: [(String, String)]
    /// The largest response body accepted.
    public var maxResponseBytes: Int

    public init(
        server: URL, httpClient: HTTPClient = .shared, timeout: TimeAmount = .seconds(60), headers: [(String, String)] = [],
        maxResponseBytes: Int = 64 << 20
    ) {
        self.server = server
        self.httpClient = httpClient
        self.timeout = timeout
        self.headers = headers
        self.maxResponseBytes = maxResponseBytes
    }

    public func upload(_ batch: ChangeBatch, dataset: String, accessToken: String?) async throws -> ChangeResults {
        try DatasetName.validate(dataset)
        let url = server.appendingPathComponent("v1/datasets/\(dataset)/changes").absoluteString
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "Accept", value: "application/json")
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let authorization = try BearerAuthorization.header(for: accessToken) {
            request.headers.replaceOrAdd(name: "Authorization", value: authorization)
        }
        let body = try JSONEncoder().encode(batch)
        request.body = .bytes(body)

        let response: HTTPClientResponse
        let bytes: ByteBuffer
        do {
            response = try await httpClient.execute(request, timeout: timeout)
            bytes = try await response.body.collect(upTo: maxResponseBytes)
        } catch {
            throw TransportFailure.error(
                error, url: url,
                offline: FerryError(
                    .offline, "cannot reach \(server.absoluteString) to upload edits; they stay queued and will be sent later",
                    underlying: error))
        }
        let data = Data(bytes.readableBytesView)
        switch response.status.code {
        case 200:
            do {
                return try JSONDecoder().decode(ChangeResults.self, from: data)
            } catch {
                throw FerryError(.network, "the server answered the upload with a malformed body; edits stay queued", underlying: error)
            }
        case 401, 403:
            throw BearerAuthorization.refusal(status: Int(response.status.code), url: url)
        case 400..<500:
            throw FerryError(.badInput, "the server refused the upload (\(response.status.code)): \(Self.errorMessage(data))")
        default:
            throw FerryError(.network, "the server failed the upload (\(response.status.code)): \(Self.errorMessage(data)); edits stay queued")
        }
    }

    /// The `message` of a `{"error":{"code","message"}}` body, or the body's start.
    static func errorMessage(_ data: Data) -> String {
        struct Envelope: Decodable { struct Inner: Decodable { var message: String }; var error: Inner }
        // Any body will do for the message: a proxy's HTML error page is shown by its start instead.
        if let envelope = try? JSONDecoder().decode(Envelope.self, from: data) { return envelope.error.message }
        return String(decoding: data.prefix(200), as: UTF8.self)
    }
}
