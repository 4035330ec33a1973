import Crypto
import FerryCore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore

/// A deliberately wrong "server" for the bad-server cases only (the good path always uses the real Ferry server).
/// It serves the bytes of a real published snapshot, misbehaving as told, and records every snapshot request's Range
/// header. Its manifest promises what its snapshot responses claim (the same checksum), as a Ferry server's does; it
/// has no gzip copy, except for `gzipOfWrongBytes`.
struct HostileServer {
    enum Behavior: Sendable {
        /// The promised ETag/Repr-Digest, but one byte in the middle flipped.
        case wrongBytes
        /// The promised ETag, but only the first half of the file (with a matching Content-Length).
        case truncatedBody
        /// Announces the full Content-Length, sends half, then drops the connection (a server dying mid-download).
        case dropsMidway
        /// Ignores Range and If-Range: always 200 with the full file.
        case ignoresRange
        /// Answers a Range request with a 206 whose Content-Range starts at byte 0, then correctly without Range.
        case wrongRangeStart
        /// Sends random bytes that hash to the ETag it announces (so only the SQLite checks can catch it).
        case notSQLite
        /// No ETag and no Repr-Digest.
        case noChecksum
        /// A well-formed gzip stream with the promised `"<sha256>-gzip"` ETag whose content has one byte flipped.
        case gzipOfWrongBytes
    }

    actor RequestLog {
        private(set) var ranges: [String?] = []
        func record(_ range: String?) { ranges.append(range) }
    }

    let bytes: [UInt8]
    let behavior: Behavior
    let log = RequestLog()

    let dataset: String
    let version: Int

    init(snapshot: URL, behavior: Behavior, dataset: String = "trips", version: Int = 1) throws {
        bytes = Array(try Data(contentsOf: snapshot))
        self.behavior = behavior
        self.dataset = dataset
        self.version = version
    }

    /// The checksum its manifest and ETags promise.
    var promisedSHA256: String {
        behavior == .notSQLite ? sha256Hex(Self.notSQLiteBytes(count: bytes.count)) : sha256Hex(bytes)
    }

    static func notSQLiteBytes(count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) } }

    /// `bytes` with one byte flipped, gzipped.
    static func gzipOfWrongBytes(_ bytes: [UInt8]) throws -> [UInt8] {
        let temp = try TemporaryDirectory("ferry-hostile")
        defer { temp.remove() }
        var wrong = bytes
        wrong[wrong.count / 2] ^= 0xFF
        try Data(wrong).write(to: temp.appending("wrong"))
        try Gzip.compressFile(from: temp.appending("wrong"), to: temp.appending("wrong.gz"))
        return Array(try Data(contentsOf: temp.appending("wrong.gz")))
    }

    /// Runs the server on 127.0.0.1, port 0, for the duration of `body`, which gets its base URL.
    func run<T: Sendable>(_ body: @Sendable @escaping (URL) async throws -> T) async throws -> T {
        let router = Router()
        let bytes = bytes
        let behavior = behavior
        let log = log
        let manifest = Manifest(
            dataset: dataset, version: version, sha256: promisedSHA256, size: Int64(bytes.count), gzipSize: 0,
            createdAt: "2026-11-21T10:00:00.000Z", schemaVersion: 1, tables: [:], versions: [version])
        let manifestBody = try manifest.jsonData()
        let gzipped = behavior == .gzipOfWrongBytes ? try Self.gzipOfWrongBytes(bytes) : []
        router.get("/v1/datasets/:dataset/manifest") { request, _ -> Response in
            var headers: HTTPFields = [
                .contentType: "application/json", .eTag: "\"\(manifest.sha256)\"", .cacheControl: "no-cache",
            ]
            if let inm = request.headers[.ifNoneMatch], inm.contains(manifest.sha256) {
                return Response(status: .notModified, headers: headers)
            }
            headers[.contentLength] = String(manifestBody.count)
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: manifestBody)))
        }
        let snapshot: @Sendable (Request, BasicRequestContext) async throws -> Response = { request, _ -> Response in
            let range = request.headers[.range]
            await log.record(range)
            var served = bytes
            var sha = sha256Hex(bytes)
            switch behavior {
            case .wrongBytes:
                served[served.count / 2] ^= 0xFF
            case .truncatedBody:
                served = Array(bytes.prefix(bytes.count / 2))
            case .notSQLite:
                served = Self.notSQLiteBytes(count: bytes.count)
                sha = sha256Hex(served)
            case .dropsMidway, .ignoresRange, .wrongRangeStart, .noChecksum, .gzipOfWrongBytes:
                break
            }
            if behavior == .gzipOfWrongBytes {
                let headers: HTTPFields = [
                    .contentType: "application/vnd.sqlite3", .contentEncoding: "gzip", .eTag: "\"\(sha)-gzip\"",
                    .vary: "Accept-Encoding",
                ]
                return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: gzipped)))
            }
            var headers: HTTPFields = [.contentType: "application/vnd.sqlite3", .acceptRanges: "bytes"]
            if behavior != .noChecksum {
                headers[.eTag] = "\"\(sha)\""
                headers[HTTPField.Name("Repr-Digest")!] = FileDigest.reprDigest(hex: sha)!
            }
            if let inm = request.headers[.ifNoneMatch], inm.contains(sha) {
                return Response(status: .notModified, headers: headers)
            }
            if behavior == .wrongRangeStart, range != nil {
                headers[.contentRange] = "bytes 0-\(served.count - 1)/\(served.count)"
                return Response(
                    status: .partialContent, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: served)))
            }
            if behavior == .dropsMidway {
                let half = ByteBuffer(bytes: served[0..<(served.count / 2)])
                return Response(
                    status: .ok, headers: headers,
                    body: ResponseBody(contentLength: served.count) { writer in
                        try await writer.write(half)
                        throw CancellationError()
                    })
            }
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: served)))
        }
        router.get("/v1/datasets/:dataset/snapshot", use: snapshot)
        router.get("/v1/datasets/:dataset/versions/:version", use: snapshot)
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        return try await app.test(.live) { client in
            try await body(URL(string: "http://127.0.0.1:\(client.port!)")!)
        }
    }
}

func sha256Hex(_ bytes: [UInt8]) -> String { SHA256.hash(data: bytes).hex }
