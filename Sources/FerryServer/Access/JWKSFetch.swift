import FerryCore
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// One `GET` of a JWKS URL over SwiftNIO (plain HTTP or TLS with the system's trust roots): status 200 and at most
/// `limit` bytes, within `timeout`, no redirects. The server's only outgoing HTTP request, so it needs no HTTP client
/// library (AsyncHTTPClient in FerryServer clashes with its `stat` use under MemberImportVisibility).
enum JWKSFetch {
    static func get(_ source: String, timeout: Duration = .seconds(10), limit: Int = 1 << 20) async throws -> Data {
        guard let url = URL(string: source), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
            let host = url.host, !host.isEmpty
        else { throw FerryError(.badInput, "not an http(s) URL", path: source) }
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        let path = url.path.isEmpty ? "/" : url.path
        let target = url.query.map { path + "?" + $0 } ?? path
        let hostHeader = url.port.map { "\(host):\($0)" } ?? host
        return try await withThrowingTaskGroup(of: Data.self) { group in
            group.addTask {
                try await fetch(
                    host: host, port: port, tls: scheme == "https", target: target, hostHeader: hostHeader,
                    limit: limit, source: source)
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                throw FerryError(.network, "the JWKS URL did not answer within \(timeout)", path: source)
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
    }

    private static func fetch(
        host: String, port: Int, tls: Bool, target: String, hostHeader: String, limit: Int, source: String
    ) async throws -> Data {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(10))
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if tls {
                        let context = try NIOSSLContext(configuration: .makeClientConfiguration())
                        try channel.pipeline.syncOperations.addHandler(
                            try NIOSSLClientHandler(context: context, serverHostname: host))
                    }
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(
                        wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: target)
            head.headers = [
                "Host": hostHeader, "Accept": "application/json", "Connection": "close", "User-Agent": "ferry",
            ]
            try await outbound.write(.head(head))
            try await outbound.write(.end(nil))
            var status: HTTPResponseStatus?
            var body = ByteBuffer()
            reading: for try await part in inbound {
                switch part {
                case .head(let response): status = response.status
                case .body(var chunk):
                    guard body.readableBytes + chunk.readableBytes <= limit else {
                        throw FerryError(.badInput, "the JWKS is larger than \(limit) bytes", path: source)
                    }
                    body.writeBuffer(&chunk)
                case .end: break reading
                }
            }
            guard let status else { throw FerryError(.network, "the JWKS URL closed without answering", path: source) }
            guard status == .ok else {
                throw FerryError(.network, "the JWKS URL answered \(status.code), not 200", path: source)
            }
            return Data(body.readableBytesView)
        }
    }
}
