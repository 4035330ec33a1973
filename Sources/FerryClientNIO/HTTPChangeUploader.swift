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
        try DatasetName.validate(dataset)
        let url = server.appendingPathComponent("v1/datasets/\(dataset)/changes").absoluteString
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(name: FerryClient.deviceHeader, value: batch.clientId)
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
                NIOTransportFailure.classified(error), url: url,
                offline: FerryError(
                    .offline,
                    "cannot reach \(server.absoluteString) to upload edits; they stay queued and will be sent later",
                    underlying: error))
        }
        return try ChangeUploadResponse.results(
            status: Int(response.status.code), data: Data(bytes.readableBytesView), url: url)
    }
}
