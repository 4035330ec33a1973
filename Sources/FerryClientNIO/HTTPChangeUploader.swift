import AsyncHTTPClient
import FerryClient
import FerryCore
import Foundation
import NIOCore
import NIOHTTP1

/// `POST {server}/v1/datasets/{dataset}/changes` over AsyncHTTPClient. `dataset` is a dataset or one of its schema
/// lines (`trips.v2`); the batch's `clientId` goes as `Ferry-Device`.
///
/// ```swift
/// let uploader = HTTPChangeUploader(server: URL(string: "http://127.0.0.1:8080")!)
/// let results = try await uploader.upload(batch, dataset: "trips.v2")
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
        server: URL, httpClient: HTTPClient = .shared, timeout: TimeAmount = .seconds(60),
        headers: [(String, String)] = [],
        maxResponseBytes: Int = 64 << 20
    ) {
        self.server = server
        self.httpClient = httpClient
        self.timeout = timeout
        self.headers = headers
        self.maxResponseBytes = maxResponseBytes
    }

    public func upload(_ batch: ChangeBatch, dataset: String, accessToken: String?) async throws -> ChangeResults {
        let upload = try ChangeUploadRequest(
            server: server, batch: batch, dataset: dataset, accessToken: accessToken, extraHeaders: headers)
        let url = upload.url.absoluteString
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        for (name, value) in upload.headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(upload.body)
        let response: HTTPClientResponse
        do {
            response = try await httpClient.execute(request, timeout: timeout)
        } catch {
            throw NIOTransportFailure.error(error, url: url, exchange: .upload)
        }
        var data = Data()
        do {
            for try await buffer in response.body {
                try ChangeUploadResponse.append(Data(buffer.readableBytesView), to: &data, limit: maxResponseBytes)
            }
        } catch {
            throw NIOTransportFailure.error(error, url: url, exchange: .upload, answerBegan: true)
        }
        return try ChangeUploadResponse.results(status: Int(response.status.code), data: data, url: url)
    }
}
