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

/// The HTTP stack of `ferry fetch`, `push` and `sync`: one transport for everything they send, on one
/// connection setup (`--connect-timeout`, `--read-timeout`, `--ca`).
///
/// The CLI uses AsyncHTTPClient (FerryClientNIO), not FerryClient's default URLSession. `scripts/bench fetch` on
/// loopback (131 MB, nearly incompressible rows, median of 5) measured URLSession faster in wall time (0.99 s against
/// 1.25 s; curl 1.16 s): it skips inflating, as it asks for the SQLite file itself. It still stays off the CLI on
/// Linux, because there
/// - it cannot trust `--ca` (FoundationNetworking has no server-trust hook) and has no separate `--connect-timeout`;
/// - it cannot pause a transfer, so the bytes the disk has not taken stay in memory (peak RSS 108 MB against 52 MB
///   in that run; with `--limit-rate`, the whole file);
/// - it moves the uncompressed file: on a real link, with rows that compress, the gzip copy is the faster transfer.
/// `--transport urlsession` selects URLSession, for the benchmark.
struct ClientHTTP {
    /// Downloads, change uploads and attachments alike.
    let transport: any HTTPTransport

    init(_ choice: TransportChoice, http: HTTPClient, access: AccessOptions) throws {
        switch choice {
        case .asyncHTTPClient:
            transport = AsyncHTTPClientTransport(client: http)
        case .urlSession:
            do {
                transport = try URLSessionTransport(
                    requestTimeout: access.readTimeout, trusting: try access.trustedCertificates())
            } catch let error as FerryError {
                throw ValidationError("--transport urlsession: \(error.message)")
            }
        }
    }
}
