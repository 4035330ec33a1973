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

/// Reads NIO's and AsyncHTTPClient's errors for FerryClient's ``TransportFailure``: a TLS failure is wrapped in a
/// ``ClassifiedTLSFailure`` (so `FerryError.tlsProblem` sees it without FerryClient knowing NIOSSL), and a
/// connection failure is put in words a person reads.
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

    /// `error` as FerryClient's ``TransportFailure/error(_:url:offline:)`` takes it: a TLS failure classified.
    static func classified(_ error: any Error) -> any Error {
        guard let problem = tlsProblem(error) else { return error }
        return ClassifiedTLSFailure(problem, cause: error)
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
        if let client = error as? HTTPClientError, client == .connectTimeout {
            return "the connection timed out"
        }
        return "\(error)"
    }

}
