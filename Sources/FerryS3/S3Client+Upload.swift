import AsyncHTTPClient
import FerryCore
import Foundation
import NIOCore
import NIOHTTP1

/// What the bucket publisher needs beyond ``S3Client``'s in-memory requests: an object streamed into a local file,
/// so a large snapshot never sits in memory.
extension S3Client {
    /// Streams object `key` into `file` (created or truncated) and returns its size, or nil when the bucket has no
    /// such object. The caller verifies, fsyncs and renames the file.
    public func downloadToFile(bucket: String, key: String, file: URL) async throws -> Int64? {
        let (scheme, host, path) = configuration.address(bucket: bucket, key: key)
        let signer = SigV4(credentials: configuration.credentials, region: configuration.region)
        let signed =
            [("host", host)]
            + signer.sign(
                method: "GET", path: path, query: [], headers: [("host", host)], payload: .of(Data()), date: now())
        var request = HTTPClientRequest(url: "\(scheme)://\(host)\(SigV4.encodePath(path))")
        request.method = .GET
        for (name, value) in signed { request.headers.add(name: name, value: value) }
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request, timeout: TimeAmount(timeout))
        } catch {
            throw FerryError(
                .network,
                "GET s3://\(bucket)/\(key): could not reach \(scheme)://\(host): check the endpoint "
                    + "(AWS_ENDPOINT_URL) and the network", underlying: error)
        }
        let status = Int(response.status.code)
        guard status == 200 else {
            let data = Data((try? await response.body.collect(upTo: 1 << 20))?.readableBytesView ?? [])
            if status == 404, S3ErrorResponse.parse(status: status, body: data).code != "NoSuchBucket" { return nil }
            throw S3ErrorResponse.parse(status: status, body: data).ferryError(
                operation: "GET", bucket: bucket, key: key, accessKeyID: configuration.credentials.accessKeyID,
                serverTime: response.headers.first(name: "date").flatMap(Self.parseHTTPDate), now: now())
        }
        guard FileManager.default.createFile(atPath: file.path, contents: nil),
            let handle = FileHandle(forWritingAtPath: file.path)
        else { throw FerryError(.io, "cannot create a file for s3://\(bucket)/\(key)", path: file.path) }
        defer { try? handle.close() }
        var size: Int64 = 0
        do {
            for try await chunk in response.body {
                try handle.write(contentsOf: Data(chunk.readableBytesView))
                size += Int64(chunk.readableBytes)
            }
        } catch let error as FerryError {
            throw error
        } catch {
            throw FerryError(
                .network, "GET s3://\(bucket)/\(key): the download broke off after \(size) bytes", path: file.path,
                underlying: error)
        }
        return size
    }
}
