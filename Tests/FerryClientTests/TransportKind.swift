import AsyncHTTPClient
import FerryClientNIO
import FerryCore
import Foundation
import NIOCore
import Testing

@testable import FerryClient

/// The transports the same test bodies run against: FerryClient's default (URLSession) and FerryClientNIO's
/// (AsyncHTTPClient). `@Test(arguments: TransportKind.allCases)`.
enum TransportKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case urlSession
    case asyncHTTPClient

    var testDescription: String { rawValue }

    /// True when the transport carries the server's gzip copy as it is; URLSession asks for the SQLite file itself
    /// (`Accept-Encoding: identity`), as it would inflate the gzip copy behind the client's back.
    var carriesGzip: Bool { self == .asyncHTTPClient }

    /// The bytes a whole download of `manifest`'s version moves on the wire with this transport.
    func wireSize(_ manifest: Manifest) -> Int64 {
        carriesGzip && manifest.gzipSize > 0 ? manifest.gzipSize : manifest.size
    }

    /// True when the transport can trust a private CA on this platform (URLSession only through Apple's Security).
    var trustsPrivateCA: Bool {
        #if canImport(Security)
            return true
        #else
            return self == .asyncHTTPClient
        #endif
    }

    /// The kinds that can pause a transfer while the client is behind (what a test of a server killed mid-body under
    /// `maxBytesPerSecond` needs: otherwise the whole body has arrived in memory before the kill). FoundationNetworking
    /// cannot (docs/client.md, Transport), so on Linux only AsyncHTTPClient.
    static var pausingTransfers: [TransportKind] {
        #if canImport(FoundationNetworking)
            return [.asyncHTTPClient]
        #else
            return allCases
        #endif
    }

    /// The hidden option of the `ferry` CLI that selects this transport, for tests that run the real CLI.
    var cliArguments: [String] { ["--transport", self == .urlSession ? "urlsession" : "async-http-client"] }

    /// The process-wide transport of this kind (nothing to shut down).
    var shared: any HTTPTransport {
        switch self {
        case .urlSession: return URLSessionTransport.shared
        case .asyncHTTPClient: return AsyncHTTPClientTransport()
        }
    }

    /// A transport of its own with these settings, and an uploader on the same connection settings; `shutdown()` when
    /// done.
    func make(connectTimeout: Duration = .seconds(10), trusting ca: TrustedCertificates? = nil) throws -> TestTransport
    {
        switch self {
        case .urlSession:
            let transport = try URLSessionTransport(requestTimeout: connectTimeout, trusting: ca)
            return TestTransport(snapshot: transport, http: nil)
        case .asyncHTTPClient:
            let http = try AsyncHTTPClientTransport.makeHTTPClient(
                connectTimeout: .milliseconds(Int64(connectTimeout.components.seconds * 1000)), trusting: ca)
            return TestTransport(snapshot: AsyncHTTPClientTransport(client: http), http: http)
        }
    }
}

/// A transport made by ``TransportKind/make(connectTimeout:trusting:)`` and its uploader.
struct TestTransport: Sendable {
    let snapshot: any HTTPTransport
    let http: HTTPClient?

    /// A change uploader on this transport.
    func uploader(server: URL) -> ChangeUploader { ChangeUploader(server: server, transport: snapshot) }

    func shutdown() async throws { try await http?.shutdown() }
}

extension FerryClient.Configuration {
    /// This configuration on `transport` (the tests open clients on either transport, or on one that cuts or counts).
    func using(_ transport: any HTTPTransport) -> Self {
        var configuration = self
        configuration.transport = transport
        return configuration
    }
}
