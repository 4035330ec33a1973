import FerryCore
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `POST {server}/v1/datasets/{dataset}/changes` over a ``URLSessionTransport``'s session: the default uploader of
/// ``FerryClient/push(batchSize:)``, which takes the client's transport when that is a ``URLSessionTransport`` (so a
/// private CA applies to uploads too). `dataset` is a dataset or one of its schema lines (`trips.v2`); the batch's
/// `clientId` goes as `Ferry-Device`.
///
/// ```swift
/// let uploader = URLSessionChangeUploader(server: URL(string: "http://127.0.0.1:8080")!)
/// let results = try await uploader.upload(batch, dataset: "trips.v2")
/// ```
public struct URLSessionChangeUploader: ChangeUploader {
    public var server: URL
    /// The transport whose session carries the upload. Default ``URLSessionTransport/shared``.
    public var transport: URLSessionTransport
    /// The longest one upload may take, answer included. Default 60 s.
    public var timeout: Duration
    /// Extra request headers. The access token goes through `upload(_:dataset:accessToken:)`, not here.
    public var headers: [(String, String)]
    /// The largest response body accepted.
    public var maxResponseBytes: Int

    public init(
        server: URL, transport: URLSessionTransport = .shared, timeout: Duration = .seconds(60),
        headers: [(String, String)] = [],
        maxResponseBytes: Int = 64 << 20
    ) {
        self.server = server
        self.transport = transport
        self.timeout = timeout
        self.headers = headers
        self.maxResponseBytes = maxResponseBytes
    }

    public func upload(_ batch: ChangeBatch, dataset: String, accessToken: String?) async throws -> ChangeResults {
        let upload = try ChangeUploadRequest(
            server: server, batch: batch, dataset: dataset, accessToken: accessToken, extraHeaders: headers)
        var request = URLRequest(url: upload.url, timeoutInterval: URLSessionTransport.seconds(timeout))
        request.httpMethod = "POST"
        for (name, value) in upload.headers { request.addValue(value, forHTTPHeaderField: name) }
        request.httpBody = upload.body
        let url = upload.url.absoluteString
        let limit = maxResponseBytes
        // A failure before the answer is classified by the transport; one while reading it, here.
        let (status, data) = try await transport.exchange(request, for: .upload) { head, body in
            var data = Data()
            do {
                for try await chunk in body { try ChangeUploadResponse.append(chunk, to: &data, limit: limit) }
            } catch {
                throw TransportFailure.error(error, url: url, exchange: .upload, answerBegan: true)
            }
            return (head.status, data)
        }
        return try ChangeUploadResponse.results(status: status, data: data, url: url)
    }
}
