import AsyncHTTPClient
import FerryCore
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// What ``S3Client/download(bucket:key:to:)`` wrote.
public struct S3Download: Sendable, Equatable {
    /// The bytes written.
    public var size: Int64
    /// Their SHA-256, hex, computed while they were written.
    public var sha256: String
    public var etag: String?
}

extension S3Client {
    /// Streams an object into `file` (created or truncated) through ``VerifiedFileWriter``: hashed as it is written,
    /// in 1 MiB hops on `NIOThreadPool.singleton` (memory stays flat whatever the object's size), then fsynced. The
    /// file is not renamed: the caller checks the checksum first, then renames it into place.
    ///
    /// ```swift
    /// let got = try await s3.download(bucket: "b", key: "ds/objects/ab….sqlite", to: tmp)
    /// guard got.sha256 == expected else { … }
    /// ```
    public func download(bucket: String, key: String, to file: URL) async throws -> S3Download {
        let (request, endpoint) = signedRequest("GET", bucket: bucket, key: key, payload: .of(Data()))
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request, timeout: TimeAmount(timeout))
        } catch {
            throw unreachable("GET", bucket: bucket, key: key, endpoint: endpoint, error)
        }
        guard response.status.code == 200 else {
            // The error's body only adds S3's code to the status; without it the status alone is reported.
            let body =
                // Unreadable: the status alone is reported.
                (try? await response.body.collect(upTo: 1 << 20)).map { Data($0.readableBytesView) } ?? Data()
            throw failure(response, body: body, operation: "GET", bucket: bucket, key: key)
        }
        let writer = try await VerifiedFileWriter.open(file, .truncate, lane: Self.lane)
        do {
            for try await chunk in response.body {
                if chunk.withUnsafeReadableBytes(writer.buffer) { try await writer.flush() }
            }
        } catch let error as FerryError where error.code == .io || error.code == .diskFull {
            throw error
        } catch {
            throw FerryError(
                .network, "GET s3://\(bucket)/\(key): the download broke off after \(writer.size) bytes",
                path: file.path, underlying: error)
        }
        let got = try await writer.finish()
        return S3Download(size: got.size, sha256: got.sha256, etag: response.headers.first(name: "etag"))
    }

    /// The server's lane for short blocking file work (docs/ARCHITECTURE.md, "Concurrency").
    static let lane: BlockingLane = { work in try await NIOThreadPool.singleton.runIfActive(work) }
}
