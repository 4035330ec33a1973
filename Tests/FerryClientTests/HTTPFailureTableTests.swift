import AsyncHTTPClient
import FerryClientNIO
import FerryCore
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import FerryClient

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One table of HTTP failures, each run through both change uploaders (URLSession, AsyncHTTPClient) and both snapshot
/// transports (a check with each), against real local sockets and servers: the two stacks must turn the same failure
/// into the same `FerryError` (code, TLS problem, the words that say what stays as it was).
@Suite struct HTTPFailureTableTests {
    enum Failure: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// Nothing listens on the port.
        case refused
        /// The host name cannot be resolved (`.invalid` never resolves, RFC 6761).
        case unresolvable
        /// A listener that accepts and never answers: the timeout ends it.
        case silent
        /// HTTPS whose certificate the client does not trust.
        case untrustedCertificate
        /// HTTPS whose certificate is trusted but names another host.
        case wrongHost
        /// The answer's head arrives, then the connection drops mid-body.
        case resetMidAnswer
        /// A 200 whose body is larger than the client accepts.
        case oversizedAnswer
        case unauthorized401
        case forbidden403
        /// 503 asking to come back in an hour.
        case failingWithRetryAfter

        var testDescription: String { rawValue }
    }

    enum Surface: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case upload, snapshot
        var testDescription: String { rawValue }
    }

    /// What every stack must make of `failure` on `surface`: the code, the TLS problem, and words the message holds.
    static func expected(_ failure: Failure, _ surface: Surface, _ kind: TransportKind) -> (
        FerryError.Code, TLSProblem?, String
    ) {
        let offline = surface == .upload ? "stay queued" : "offline is normal"
        switch failure {
        case .refused, .unresolvable, .silent: return (.offline, nil, offline)
        case .resetMidAnswer: return (.offline, nil, "broke off")
        case .untrustedCertificate:
            return (.network, .untrustedCertificate, "TLS: the server's certificate is not trusted")
        case .wrongHost:
            // URLSession on Linux cannot trust the private CA that signed it: the certificate is untrusted first.
            return kind.trustsPrivateCA
                ? (.network, .wrongHost, "does not name") : (.network, .untrustedCertificate, "not trusted")
        case .oversizedAnswer:
            return surface == .upload ? (.network, nil, "larger than") : (.corruptTransfer, nil, "larger than")
        case .unauthorized401, .forbidden403: return (.unauthorized, nil, failure == .forbidden403 ? "403" : "401")
        case .failingWithRetryAfter: return (.network, nil, "503")
        }
    }

    @Test(
        "the same failure becomes the same FerryError through both uploaders and both transports",
        arguments: Failure.allCases, TransportKind.allCases)
    func sameErrorEverywhere(_ failure: Failure, _ kind: TransportKind) async throws {
        try await Self.withServer(for: failure) { server in
            for surface in Surface.allCases {
                let error = try await Self.run(surface, kind, server: server, failure: failure)
                let (code, tls, words) = Self.expected(failure, surface, kind)
                let context = "\(surface) \(kind): \(String(describing: error)) \(String(describing: error.underlying))"
                #expect(error.code == code, "\(context)")
                #expect(error.tlsProblem == tls, "\(context)")
                #expect(error.message.contains(words), "\(context)")
            }
        }
    }

    /// The error one exchange on `surface` ends with: an upload, or a check that fetches the manifest.
    static func run(_ surface: Surface, _ kind: TransportKind, server: URL, failure: Failure) async throws
        -> FerryError
    {
        let trusted = failure == .wrongHost ? TLSTests.ca : TLSTests.otherCA
        let ca = kind.trustsPrivateCA ? try TrustedCertificates(pemFile: trusted) : nil
        let timeout = Duration.seconds(2)
        let limit = 1024
        let transport: any HTTPTransport
        let uploader: ChangeUploader
        let http: HTTPClient?
        switch kind {
        case .urlSession:
            let session = try URLSessionTransport(requestTimeout: timeout, trusting: ca)
            transport = session
            http = nil
            uploader = ChangeUploader(server: server, transport: session, maxResponseBytes: limit)
        case .asyncHTTPClient:
            let client = try AsyncHTTPClientTransport.makeHTTPClient(
                connectTimeout: .seconds(2), readTimeout: .seconds(2), trusting: ca)
            http = client
            transport = AsyncHTTPClientTransport(client: client, deadline: .seconds(10))
            uploader = ChangeUploader(server: server, transport: transport, maxResponseBytes: limit)
        }
        let temp = try TemporaryDirectory("ferry-failure-table")
        defer { temp.remove() }
        let error = await #expect(throws: FerryError.self) {
            switch surface {
            case .upload:
                let batch = ChangeBatch(clientId: "device", sentAt: Timestamp.format(Date()), changes: [])
                _ = try await uploader.upload(batch, dataset: "trips", accessToken: nil)
            case .snapshot:
                var configuration = FerryClient.Configuration(
                    directory: temp.appending("client"), serverURL: server, dataset: "trips")
                configuration.push.onOpen = false
                configuration.download.retryAfterLimit = .seconds(1)
                let client = try await FerryClient.open(configuration: configuration.using(transport), logger: .test)
                do {
                    _ = try await client.checkForUpdates()
                } catch {
                    await client.close()
                    throw error
                }
                await client.close()
            }
        }
        try await http?.shutdown()
        return try #require(error)
    }

    /// Runs `body` with the base URL that produces `failure`.
    static func withServer(for failure: Failure, _ body: @Sendable @escaping (URL) async throws -> Void) async throws {
        switch failure {
        case .refused:
            try await body(URL(string: "http://127.0.0.1:\(try BadNetworkTests.freePort())")!)
        case .unresolvable:
            try await body(URL(string: "http://ferry-test.invalid:8080")!)
        case .silent:
            let (socket, port) = try BadNetworkTests.silentListener()
            defer { close(socket) }
            try await body(URL(string: "http://127.0.0.1:\(port)")!)
        case .untrustedCertificate, .wrongHost:
            try await withHTTPSServer { port in
                // 127.0.0.2 reaches the same listener, but the certificate names 127.0.0.1 and localhost only.
                let host = failure == .wrongHost ? "127.0.0.2" : "127.0.0.1"
                try await body(URL(string: "https://\(host):\(port)")!)
            }
        case .resetMidAnswer, .oversizedAnswer, .unauthorized401, .forbidden403, .failingWithRetryAfter:
            try await withMisbehavingServer(failure, body)
        }
    }

    /// `ferry serve` over HTTPS (Tests/Fixtures/tls) on every address of the machine, port 0. (HummingbirdTesting's
    /// live server listens on localhost only, which the certificate names.)
    static func withHTTPSServer(_ body: @Sendable @escaping (Int) async throws -> Void) async throws {
        let temp = try TemporaryDirectory("ferry-failure-tls")
        defer { temp.remove() }
        let snapshots = SnapshotFixtures(root: temp.appending("store"))
        try snapshots.publish()
        let server = try await ServeProcess(
            store: snapshots.store.root,
            arguments: [
                "--host", "0.0.0.0", "--tls-cert", TLSTests.serverCertificate.path, "--tls-key",
                TLSTests.serverKey.path,
            ])
        defer { server.kill9() }
        try await body(try #require(server.url.port))
    }

    /// A server whose manifest and changes routes both answer with `failure`.
    static func withMisbehavingServer(_ failure: Failure, _ body: @Sendable @escaping (URL) async throws -> Void)
        async throws
    {
        let router = Router()
        let answer: @Sendable (Request, BasicRequestContext) async throws -> Response = { _, _ in
            switch failure {
            case .resetMidAnswer:
                return Response(
                    status: .ok, headers: [.contentType: "application/json"],
                    body: ResponseBody(contentLength: 100_000) { writer in
                        try await writer.write(ByteBuffer(string: "{\"results\":["))
                        throw CancellationError()  // the connection drops with the body unfinished
                    })
            case .oversizedAnswer:
                let size = SnapshotDownloader.manifestLimit + 1
                return Response(
                    status: .ok, headers: [.contentType: "application/json"],
                    body: .init(byteBuffer: ByteBuffer(repeating: UInt8(ascii: " "), count: size)))
            case .unauthorized401, .forbidden403:
                return Response(
                    status: failure == .forbidden403 ? .forbidden : .unauthorized,
                    headers: [.contentType: "application/json"],
                    body: .init(
                        byteBuffer: ByteBuffer(string: #"{"error":{"code":"unauthorized","message":"no entry"}}"#)))
            default:
                return Response(
                    status: .serviceUnavailable, headers: [.retryAfter: "3600", .contentType: "application/json"],
                    body: .init(byteBuffer: ByteBuffer(string: #"{"error":{"code":"unavailable","message":"busy"}}"#)))
            }
        }
        router.get("/v1/datasets/:dataset/manifest", use: answer)
        router.post("/v1/datasets/:dataset/changes", use: answer)
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in try await body(URL(string: "http://127.0.0.1:\(client.port!)")!) }
    }
}
