import ArgumentParser
import AsyncHTTPClient
import FerryClient
import FerryClientNIO
import FerryCore
import Foundation

/// Which HTTP stack a client command uses (`--transport`, hidden).
enum TransportChoice: String, ExpressibleByArgument, CaseIterable, Sendable {
    /// FerryClientNIO's AsyncHTTPClientTransport: the CLI's default (see ``ClientHTTP``).
    case asyncHTTPClient = "async-http-client"
    /// FerryClient's URLSessionTransport (FoundationNetworking on Linux).
    case urlSession = "urlsession"
}

/// The HTTP stack of `ferry fetch`, `push` and `sync`: the snapshot transport and the change uploader, on one
/// connection setup (`--connect-timeout`, `--read-timeout`, `--ca`).
///
/// The CLI uses AsyncHTTPClient (FerryClientNIO), not FerryClient's default URLSession: on Linux, `scripts/bench
/// fetch` measured it faster (the gzip copy travels as it is, where URLSession must ask for the SQLite file, and
/// FoundationNetworking's curl path costs more CPU per byte; figures in docs/client.md), and only it can trust
/// `--ca` there (FoundationNetworking has no server-trust hook). `--transport urlsession` selects URLSession, for
/// the benchmark.
struct ClientHTTP {
    let snapshot: any SnapshotTransport
    let uploader: @Sendable (URL) -> any ChangeUploader

    init(_ choice: TransportChoice, http: HTTPClient, access: AccessOptions) throws {
        switch choice {
        case .asyncHTTPClient:
            snapshot = AsyncHTTPClientTransport(client: http)
            uploader = { HTTPChangeUploader(server: $0, httpClient: http) }
        case .urlSession:
            let transport: URLSessionTransport
            do {
                transport = try URLSessionTransport(requestTimeout: .milliseconds(Int64(access.readTimeout * 1000)), trusting: try access.trustedCertificates())
            } catch let error as FerryError {
                throw ValidationError("--transport urlsession: \(error.message)")
            }
            snapshot = transport
            uploader = { URLSessionChangeUploader(server: $0, transport: transport) }
        }
    }
}
