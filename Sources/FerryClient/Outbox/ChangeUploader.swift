import FerryCore
import Foundation

/// Uploads a batch of local edits and returns the server's answers. An app can plug in its own transport
/// (``URLSessionChangeUploader`` is the default; FerryClientNIO has an AsyncHTTPClient one).
///
/// Contract: POST to `{server}/v1/datasets/{dataset}/changes`, `dataset` being the dataset or the schema line
/// (`trips.v1`) the edits were made under. Send the batch's `clientId` as `Ferry-Device` (the directory's device id),
/// and `accessToken`, when there is one, as `Authorization: Bearer <token>`. Return only when the server
/// answered 200 with a well-formed body; throw a `FerryError` with code `.offline` when the server could not be
/// reached, `.network` when it failed (the edits stay queued and are retried), `.unauthorized` on a 401 or 403 (the
/// edits stay queued and are sent again, same change ids, once the app has a valid token; not retried meanwhile),
/// `.schemaRetired` on a 410 (the schema line is retired and takes no edits: nothing was applied), and `.badInput` when
/// it refused the request itself (another 4xx: retrying the same batch will not help).
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
    /// let results = try await URLSessionChangeUploader(server: url).upload(batch, dataset: "trips")
    /// ```
    public func upload(_ batch: ChangeBatch, dataset: String) async throws -> ChangeResults {
        try await upload(batch, dataset: dataset, accessToken: nil)
    }
}

/// The request every change uploader sends (see ``ChangeUploader``'s contract): `POST` to the dataset's or line's
/// `…/changes`, JSON both ways, the batch's `clientId` as `Ferry-Device`, the caller's extra headers, then the access
/// token as `Authorization: Bearer <token>` (replacing an extra `Authorization`).
package struct ChangeUploadRequest: Sendable {
    package var url: URL
    /// In the order they are sent.
    package var headers: [(name: String, value: String)]
    package var body: Data

    package init(
        server: URL, batch: ChangeBatch, dataset: String, accessToken: String?, extraHeaders: [(String, String)]
    ) throws {
        try DatasetName.validate(dataset)
        url = server.appendingPathComponent("v1/datasets/\(dataset)/changes")
        let authorization = try BearerAuthorization.header(for: accessToken)
        headers = [
            ("Content-Type", "application/json"), ("Accept", "application/json"),
            (FerryClient.deviceHeader, batch.clientId),
        ]
        headers += extraHeaders.filter { authorization == nil || $0.0.lowercased() != "authorization" }.map {
            (name: $0.0, value: $0.1)
        }
        if let authorization { headers.append(("Authorization", authorization)) }
        body = try JSONEncoder().encode(batch)
    }
}

/// What every change uploader makes of the server's answer: the results on 200, else the error its contract names.
package enum ChangeUploadResponse {
    /// Appends one chunk of the answer's body to `data`, refusing an answer larger than `limit` bytes.
    package static func append(_ chunk: Data, to data: inout Data, limit: Int) throws {
        data.append(chunk)
        guard data.count <= limit else {
            throw FerryError(
                .network, "the server's answer to the upload is larger than \(limit) bytes; edits stay queued")
        }
    }

    /// The results in a 200's `data`, or the error for `status` (see ``ChangeUploader``'s contract).
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
