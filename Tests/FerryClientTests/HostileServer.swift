import Crypto
import FerryCore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore

/// A deliberately wrong "server" for the bad-server cases only (the good path always uses the real Ferry server).
/// It serves the bytes of a real published snapshot, misbehaving as told, and records every request's Range header.
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
    }

    actor RequestLog {
        private(set) var ranges: [String?] = []
        func record(_ range: String?) { ranges.append(range) }
    }

    let bytes: [UInt8]
    let behavior: Behavior
    let log = RequestLog()

    init(snapshot: URL, behavior: Behavior) throws {
        bytes = Array(try Data(contentsOf: snapshot))
        self.behavior = behavior
    }

    /// Runs the server on 127.0.0.1, port 0, for the duration of `body`, which gets its base URL.
    func run<T: Sendable>(_ body: @Sendable @escaping (URL) async throws -> T) async throws -> T {
        let router = Router()
        let bytes = bytes
        let behavior = behavior
        let log = log
        router.get("/v1/datasets/:dataset/snapshot") { request, _ -> Response in
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
                served = (0..<bytes.count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
                sha = sha256Hex(served)
            case .dropsMidway, .ignoresRange, .wrongRangeStart, .noChecksum:
                break
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
                return Response(status: .partialContent, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: served)))
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
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        return try await app.test(.live) { client in
            try await body(URL(string: "http://127.0.0.1:\(client.port!)")!)
        }
    }
}

func sha256Hex(_ bytes: [UInt8]) -> String { SHA256.hash(data: bytes).hex }
