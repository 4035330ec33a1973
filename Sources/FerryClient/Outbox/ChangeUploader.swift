import FerryCore
import Foundation

/// Uploads a batch of local edits over an ``HTTPTransport`` and returns the server's answers: what
/// ``FerryClient/push(batchSize:)`` does with the client's transport, for a tool that sends batches itself.
///
/// `POST {server}/v1/datasets/{dataset}/changes`, `dataset` being the dataset or the schema line (`trips.v1`) the edits
/// were made under, JSON both ways; the batch's `clientId` goes as `Ferry-Device`, the caller's extra headers next,
/// then `accessToken`, when there is one, as `Authorization: Bearer <token>` (replacing an extra `Authorization`).
/// Returns only when the server answered 200 with a well-formed body; throws a `FerryError` with code `.offline` when
/// the server could not be reached, `.network` when it failed (the edits stay queued and are retried),
/// `.unauthorized` on a 401 or 403 (sent again, same change ids, once the app has a valid token), `.schemaRetired` on
/// a 410 (the line takes no edits: nothing was applied), and `.badInput` when it refused the request itself (another
/// 4xx: retrying the same batch will not help). The token is never in an error or a log line.
///
/// ```swift
/// let uploader = ChangeUploader(server: URL(string: "http://127.0.0.1:8080")!, transport: URLSessionTransport.shared)
/// let results = try await uploader.upload(batch, dataset: "trips.v2", accessToken: token)
/// ```
public struct ChangeUploader: Sendable {
    public var server: URL
    public var transport: any HTTPTransport
    /// Extra request headers. The access token goes through ``upload(_:dataset:accessToken:)``, not here.
    public var headers: [(String, String)]
    /// The largest response body accepted.
    public var maxResponseBytes: Int

    public init(
        server: URL, transport: any HTTPTransport = URLSessionTransport.shared, headers: [(String, String)] = [],
        maxResponseBytes: Int = 64 << 20
    ) {
        self.server = server
        self.transport = transport
        self.headers = headers
        self.maxResponseBytes = maxResponseBytes
    }

    public func upload(_ batch: ChangeBatch, dataset: String, accessToken: String? = nil) async throws
        -> ChangeResults
    {
        try DatasetName.validate(dataset)
        let url = server.appendingPathComponent("v1/datasets/\(dataset)/changes")
        let authorization = try BearerAuthorization.header(for: accessToken)
        var fields = ["Content-Type": "application/json", "Accept": "application/json"]
        fields[FerryClient.deviceHeader] = batch.clientId
        for (name, value) in headers where authorization == nil || name.lowercased() != "authorization" {
            fields[name] = value
        }
        if let authorization { fields["Authorization"] = authorization }
        let request = TransportRequest(
            method: "POST", url: url, headers: fields, body: .data(try JSONEncoder().encode(batch)))
        let over = FerryError(
            .network, "the server's answer to the upload is larger than \(maxResponseBytes) bytes; edits stay queued")
        let (head, data) = try await transport.collect(request, limit: maxResponseBytes, over: over)
        return try ChangeUploadResponse.results(status: head.status, data: data, url: url.absoluteString)
    }
}

/// What every change uploader makes of the server's answer: the results on 200, else the error its contract names.
package enum ChangeUploadResponse {
    /// The results in a 200's `data`, or the error for `status` (see ``ChangeUploader``).
    package static func results(status: Int, data: Data, url: String) throws -> ChangeResults {
        switch status {
        case 200:
            do {
                return try JSONDecoder().decode(ChangeResults.self, from: data)
            } catch {
                throw FerryError(
                    .network, "the server answered the upload with a malformed body; edits stay queued",
                    underlying: error)
            }
        case 401, 403:
            throw BearerAuthorization.refusal(status: status, url: url)
        case 410:
            throw FerryError(
                .schemaRetired,
                "the server takes no more edits of this schema line (410): \(errorMessage(data)); nothing was applied",
                key: "dataset")
        case 400..<500:
            throw FerryError(.badInput, "the server refused the upload (\(status)): \(errorMessage(data))")
        default:
            throw FerryError(
                .network, "the server failed the upload (\(status)): \(errorMessage(data)); edits stay queued")
        }
    }

    /// The `message` of a `{"error":{"code","message"}}` body, or the body's start.
    package static func errorMessage(_ data: Data) -> String {
        struct Envelope: Decodable {
            struct Inner: Decodable { var message: String }
            var error: Inner
        }
        // Any body will do for the message: a proxy's HTML error page is shown by its start instead.
        if let envelope = try? JSONDecoder().decode(Envelope.self, from: data) { return envelope.error.message }
        return String(decoding: data.prefix(200), as: UTF8.self)
    }
}
