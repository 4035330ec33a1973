import AsyncHTTPClient
import FerryClient
import FerryCore
import Foundation
import NIOCore
import NIOSSL

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#endif

/// Reads NIO's and AsyncHTTPClient's errors for FerryClient's ``TransportFailure``: each is wrapped in a
/// ``ClassifiedTransportFailure`` with its TLS failure, if any (so `FerryError.tlsProblem` sees it without FerryClient
/// knowing NIOSSL), and its reason in words a person reads.
enum NIOTransportFailure {
    /// The TLS failure behind a NIOSSL error, nil for any other error.
    static func tlsProblem(_ error: any Error) -> TLSProblem? {
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

    /// `error` as FerryClient's ``TransportFailure/error(_:url:exchange:answerBegan:)`` takes it: classified, a
    /// `FerryError` (which it passes on as it is) left alone.
    static func classified(_ error: any Error) -> any Error {
        if error is FerryError { return error }
        return ClassifiedTransportFailure(tlsProblem(error), reason: plainReason(error), cause: error)
    }

    /// The one way this module turns `error` into a `FerryError` (see ``TransportFailure``).
    static func error(
        _ error: any Error, url: String, exchange: TransportFailure.Exchange, answerBegan: Bool = false
    ) -> FerryError {
        TransportFailure.error(classified(error), url: url, exchange: exchange, answerBegan: answerBegan)
    }

    /// A connection failure in words a person reads: "connection refused" rather than the NIO error's own text
    /// ("connection reset (error set): Connection refused) (errno: 111)"). Anything not recognised is described as is.
    static func plainReason(_ error: any Error) -> String {
        if let io = error as? IOError {
            switch io.errnoCode {
            case ECONNREFUSED:
                return "connection refused: nothing listens there (is the server running, and is the port right?)"
            case ECONNRESET: return "the connection was reset"
            case ENETUNREACH, EHOSTUNREACH: return "the network or host is unreachable"
            case ETIMEDOUT: return "the connection timed out"
            default: return "\(io.description)"
            }
        }
        if let client = error as? HTTPClientError {
            if client == .connectTimeout || client == .readTimeout || client == .deadlineExceeded {
                return "the connection timed out"
            }
            if client == .remoteConnectionClosed { return "the server closed the connection" }
        }
        if error is NIOTooManyBytesError { return "the answer is larger than this client accepts" }
        return "\(error)"
    }

}
