import AsyncHTTPClient
import Crypto
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
    /// Streams an object into `file` (created or truncated), hashing the bytes on the way: memory stays at one
    /// MiB, whatever the object's size, and the writes run off the cooperative pool (on `NIOThreadPool.singleton`). The file is neither fsynced nor renamed: the caller verifies the
    /// checksum first, then makes it durable (`DurableFile`).
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
        // The file work runs on NIOThreadPool.singleton, the server's lane for short blocking file work
        // (docs/ARCHITECTURE.md, "Concurrency"): chunks are gathered up to `writeBatch` bytes, then written in one
        // hop, so a download costs one pool hop per MiB, not one per network chunk.
        let handle = try await NIOThreadPool.singleton.runIfActive { try Self.createFile(file) }
        defer { try? handle.close() }  // a close error after the writes succeeded loses nothing: the caller fsyncs
        var hasher = SHA256()
        var size: Int64 = 0
        var pending = ByteBuffer()
        do {
            for try await chunk in response.body {
                chunk.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
                size += Int64(chunk.readableBytes)
                pending.writeImmutableBuffer(chunk)
                if pending.readableBytes >= Self.writeBatch {
                    try await Self.write(pending, to: handle, path: file.path)
                    pending.clear()
                }
            }
        } catch let error as FerryError where error.code == .io {
            throw error
        } catch {
            throw FerryError(
                .network, "GET s3://\(bucket)/\(key): the download broke off after \(size) bytes", path: file.path,
                underlying: error)
        }
        if pending.readableBytes > 0 { try await Self.write(pending, to: handle, path: file.path) }
        return S3Download(size: size, sha256: SigV4.hex(hasher.finalize()), etag: response.headers.first(name: "etag"))
    }

    /// Bytes gathered before one write: 1 MiB, so memory stays bounded whatever the object's size.
    static let writeBatch = 1 << 20

    /// Creates (or truncates) `file` and opens it for writing. Blocking: run on the lane.
    static func createFile(_ file: URL) throws -> FileHandle {
        guard FileManager.default.createFile(atPath: file.path, contents: nil) else {
            throw FerryError(.io, "cannot create the download's temp file", path: file.path)
        }
        do {
            return try FileHandle(forWritingTo: file)
        } catch {
            throw FerryError(
                .io, "cannot open the download's temp file: \(error.localizedDescription)", path: file.path)
        }
    }

    /// Writes `bytes` to `handle` on the lane.
    static func write(_ bytes: ByteBuffer, to handle: FileHandle, path: String) async throws {
        try await NIOThreadPool.singleton.runIfActive {
            do {
                try bytes.withUnsafeReadableBytes { try handle.write(contentsOf: $0) }
            } catch {
                throw FerryError(
                    .io, "cannot write the download's temp file: \(error.localizedDescription)", path: path,
                    underlying: error)
            }
        }
    }
}
