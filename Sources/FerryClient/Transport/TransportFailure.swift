import FerryCore
import Foundation
import AsyncHTTPClient
import NIOCore
import NIOSSL
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif

/// What went wrong when a TLS connection to the server failed. A front end maps it to its own setting (the `ferry`
/// CLI to its options); the library's message names ``TrustedCertificates``.
///
/// ```swift
/// catch let error as FerryError where error.tlsProblem == .untrustedCertificate { /* ask for the private CA */ }
/// ```
public enum TLSProblem: Sendable, Equatable {
    /// The chain does not lead to a trusted root (unknown or private CA, self-signed, expired).
    case untrustedCertificate
    /// The certificate is valid but names another host.
    case wrongHost
    /// Another handshake failure (protocol or cipher mismatch, a plain HTTP server on the port).
    case handshake
}

extension FerryError {
    /// The TLS failure behind this error, nil when it is none (then retrying with the same trust settings may help).
    ///
    /// ```swift
    /// if error.tlsProblem != nil { print("check the CA the client trusts") }
    /// ```
    public var tlsProblem: TLSProblem? { TransportFailure.tlsProblem(underlying) }
}

/// Turns an error from the HTTP client (no response at all) into a `FerryError`: a server whose certificate is not
/// trusted is ``FerryError/Code/network`` with a message naming the fix, not "offline is normal"; everything else is
/// ``FerryError/Code/offline``.
enum TransportFailure {
    static func tlsProblem(_ error: (any Error)?) -> TLSProblem? {
        guard let error else { return nil }
        if let extra = error as? NIOSSLExtraError, extra == .failedToValidateHostname { return .wrongHost }
        guard let ssl = error as? NIOSSLError else { return nil }
        switch ssl {
        case .handshakeFailed(let boring):
            // BoringSSL reports a failed chain check as SSL routines:CERTIFICATE_VERIFY_FAILED.
            return String(describing: boring).contains("CERTIFICATE_VERIFY_FAILED") ? .untrustedCertificate : .handshake
        case .noCertificateToValidate, .unableToValidateCertificate:
            return .untrustedCertificate
        default:
            return .handshake
        }
    }

    /// True for a `FerryError` made from a TLS failure: retrying with the same trust settings does not help.
    static func isTLS(_ error: FerryError) -> Bool { tlsProblem(error.underlying) != nil }

    /// The `FerryError` for `error`, raised before any response arrived from `url`; `offline` is the error when the
    /// server simply could not be reached.
    static func error(_ error: any Error, url: String, offline: @autoclosure () -> FerryError) -> FerryError {
        let host = URLHost.of(url)
        switch tlsProblem(error) {
        case .untrustedCertificate:
            return FerryError(
                .network,
                "TLS: the server's certificate is not trusted (\(host)); trust the CA that signed it (TrustedCertificates); nothing local was changed",
                underlying: error)
        case .wrongHost:
            return FerryError(
                .network,
                "TLS: the server's certificate does not name \(host); use the host name the certificate was issued for, or reissue it with that name; nothing local was changed",
                underlying: error)
        case .handshake:
            return FerryError(
                .network,
                "TLS: the handshake with \(host) failed; check that the server speaks https on that port and that TrustedCertificates holds the right CA; nothing local was changed",
                underlying: error)
        case nil:
            return offline()
        }
    }
}

/// `host:port` of a URL string, for messages (never the user info, path or query).
enum URLHost {
    static func of(_ url: String) -> String {
        guard let parsed = URL(string: url), let host = parsed.host else { return "the server" }
        return parsed.port.map { "\(host):\($0)" } ?? host
    }
}

extension TransportFailure {
    /// A connection failure in words a person reads: "connection refused" rather than the NIO error's own text
    /// ("connection reset (error set): Connection refused) (errno: 111)"). Anything not recognised is described as is.
    static func plainReason(_ error: any Error) -> String {
        if let io = error as? IOError {
            switch io.errnoCode {
            case ECONNREFUSED: return "connection refused: nothing listens there (is the server running, and is the port right?)"
            case ECONNRESET: return "the connection was reset"
            case ENETUNREACH, EHOSTUNREACH: return "the network or host is unreachable"
            case ETIMEDOUT: return "the connection timed out"
            default: return "\(io.description)"
            }
        }
        if let client = error as? HTTPClientError, client == .connectTimeout {
            return "the connection timed out"
        }
        return "\(error)"
    }
}
