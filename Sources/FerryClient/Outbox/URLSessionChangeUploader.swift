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
        try DatasetName.validate(dataset)
        let url = server.appendingPathComponent("v1/datasets/\(dataset)/changes")
        var request = URLRequest(url: url, timeoutInterval: URLSessionTransport.seconds(timeout))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        request.setValue(batch.clientId, forHTTPHeaderField: FerryClient.deviceHeader)
        for (name, value) in headers { request.addValue(value, forHTTPHeaderField: name) }
        if let authorization = try BearerAuthorization.header(for: accessToken) {
            request.setValue(authorization, forHTTPHeaderField: "Authorization")
        }
        request.httpBody = try JSONEncoder().encode(batch)
        let limit = maxResponseBytes
        let (status, data): (Int, Data)
        do {
            (status, data) = try await transport.exchange(request) { head, body in
                var data = Data()
                for try await chunk in body {
                    data.append(chunk)
                    guard data.count <= limit else {
                        throw FerryError(
                            .network,
                            "the server's answer to the upload is larger than \(limit) bytes; edits stay queued")
                    }
                }
                return (head.status, data)
            }
        } catch let error as FerryError where error.code == .offline {
            throw FerryError(
                .offline,
                "cannot reach \(server.absoluteString) to upload edits; they stay queued and will be sent later",
                underlying: error.underlying)
        } catch let error as FerryError {
            throw error
        } catch {
            // The answer broke off: the server may have merged the batch; its change ids make a resend safe.
            throw FerryError(
                .offline,
                "the answer to the upload from \(server.absoluteString) broke off; edits stay queued and will be sent later",
                underlying: error)
        }
        return try ChangeUploadResponse.results(status: status, data: data, url: url.absoluteString)
    }
}
