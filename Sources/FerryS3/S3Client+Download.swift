import AsyncHTTPClient
import Crypto
import FerryCore
import Foundation
import NIOCore
import NIOHTTP1

/// What ``S3Client/download(bucket:key:to:)`` wrote.
public struct S3Download: Sendable, Equatable {
    /// The bytes written.
    public var size: Int64
    /// Their SHA-256, hex, computed while they were written.
    public var sha256: String
    public var etag: String?
}

extension S3Client {
    /// Streams an object into `file` (created or truncated), hashing the bytes on the way: memory stays at one
    /// network chunk, whatever the object's size. The file is neither fsynced nor renamed: the caller verifies the
    /// checksum first, then makes it durable (`DurableFile`).
    ///
    /// ```swift
    /// let got = try await s3.download(bucket: "b", key: "ds/objects/ab….sqlite", to: tmp)
    /// guard got.sha256 == expected else { … }
    /// ```
    public func download(bucket: String, key: String, to file: URL) async throws -> S3Download {
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
            // The error's body only adds S3's code to the status; without it the status alone is reported.
            let body =
                (try? await response.body.collect(upTo: 1 << 20)).map { Data($0.readableBytesView) } ?? Data()
            let serverTime = response.headers.first(name: "date").flatMap(Self.parseHTTPDate)
            throw S3ErrorResponse.parse(status: status, body: body).ferryError(
                operation: "GET", bucket: bucket, key: key, accessKeyID: configuration.credentials.accessKeyID,
                serverTime: serverTime, now: now())
        }
        guard FileManager.default.createFile(atPath: file.path, contents: nil) else {
            throw FerryError(.io, "cannot create the download's temp file", path: file.path)
        }
        let handle: FileHandle
        do {
            handle = try FileHandle(forWritingTo: file)
        } catch {
            throw FerryError(
                .io, "cannot open the download's temp file: \(error.localizedDescription)", path: file.path)
        }
        defer { try? handle.close() }  // a close error after the writes succeeded loses nothing: the caller fsyncs
        var hasher = SHA256()
        var size: Int64 = 0
        do {
            for try await chunk in response.body {
                chunk.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
                try handle.write(contentsOf: Data(chunk.readableBytesView))
                size += Int64(chunk.readableBytes)
            }
        } catch {
            throw FerryError(
                .network, "GET s3://\(bucket)/\(key): the download broke off after \(size) bytes", path: file.path,
                underlying: error)
        }
        return S3Download(size: size, sha256: SigV4.hex(hasher.finalize()), etag: response.headers.first(name: "etag"))
    }
}
