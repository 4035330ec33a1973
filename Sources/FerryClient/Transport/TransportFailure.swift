import FerryCore
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
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

/// A transport's error that the transport itself classified: a TLS failure (FerryClientNIO reads NIOSSL's errors,
/// ``URLSessionTransport`` the outcome of its own trust evaluation) and the reason in words a person reads
/// ("connection refused"). Its description is the cause's.
package struct ClassifiedTransportFailure: Error, Sendable, CustomStringConvertible {
    package var problem: TLSProblem?
    package var reason: String?
    package var cause: any Error

    package init(_ problem: TLSProblem?, reason: String? = nil, cause: any Error) {
        self.problem = problem
        self.reason = reason
        self.cause = cause
    }

    package var description: String { "\(cause)" }
}

/// The one way a failed HTTP exchange becomes a `FerryError`, for both transports (``URLSessionTransport``,
/// FerryClientNIO's `AsyncHTTPClientTransport`) and both change uploaders: a `FerryError` stays as it is (a status
/// the caller mapped, an answer too large); a server whose certificate is not trusted, names another host or fails
/// the handshake is `FerryError.Code.network` with a message naming the fix, never "offline is normal"; everything
/// else (refused, unresolvable, timed out, reset) is `FerryError.Code.offline`, in words a person reads, worded for
/// what was exchanged and whether the answer had begun. `URLError` codes are read here; FerryClientNIO classifies
/// NIO's errors first and hands them in as ``ClassifiedTransportFailure``.
package enum TransportFailure {
    /// What the failed exchange was for: its message says what stays as it was.
    package enum Exchange: Sendable {
        /// A manifest, version or patch request: the app keeps using database.db.
        case snapshot
        /// A change upload: the edits stay queued.
        case upload
    }

    /// The `FerryError` for `error`, raised while exchanging with `url`: before any answer arrived, or (when
    /// `answerBegan`) while its body was read.
    package static func error(_ error: any Error, url: String, exchange: Exchange, answerBegan: Bool = false)
        -> FerryError
    {
        if let ferry = error as? FerryError { return ferry }
        if let problem = tlsProblem(error) { return tlsError(problem, error, url: url) }
        let reason = plainReason(error)
        let message: String
        switch (exchange, answerBegan) {
        case (.snapshot, false):
            message =
                "cannot reach \(url): \(reason); offline is normal: the app keeps using database.db, try again later"
        case (.snapshot, true):
            message =
                "the answer from \(url) broke off: \(reason); offline is normal: the app keeps using database.db, try again later"
        case (.upload, false):
            message = "cannot reach \(url) to upload edits: \(reason); they stay queued and will be sent later"
        case (.upload, true):
            // The server may have merged the batch; its change ids make a resend safe.
            message =
                "the answer to the upload from \(url) broke off: \(reason); edits stay queued and will be sent later"
        }
        // A reason the transport put in words is in the message already; the socket library's own text ("errno: 111")
        // is kept out of what a person reads.
        let underlying: (any Error)? = (error as? ClassifiedTransportFailure)?.reason == nil ? error : nil
        return FerryError(.offline, message, underlying: underlying)
    }

    package static func tlsProblem(_ error: (any Error)?) -> TLSProblem? {
        guard let error else { return nil }
        if let classified = error as? ClassifiedTransportFailure { return classified.problem }
        if let url = error as? URLError {
            return tlsProblem(url.code) ?? (url.code == .unknown ? curlTLSProblem(url.localizedDescription) : nil)
        }
        return nil
    }

    /// FoundationNetworking reports every TLS failure as `URLError(.unknown)` (-1) with curl's message as its
    /// description ("SSL certificate problem: unable to get local issuer certificate"); this reads the message, as
    /// FerryClientNIO reads BoringSSL's. Apple's URLSession uses the specific codes instead.
    static func curlTLSProblem(_ message: String) -> TLSProblem? {
        let text = message.lowercased()
        if text.contains("does not match target host")
            || text.contains("no alternative certificate subject name matches")
        {
            return .wrongHost
        }
        if text.hasPrefix("ssl certificate problem") || text.contains("certificate verify failed")
            || text.contains("peer certificate cannot be authenticated")
        {
            return .untrustedCertificate
        }
        if text.contains("ssl") || text.contains("tls") { return .handshake }
        return nil
    }

    /// The TLS failure a `URLError` code stands for. Apple's URLSession and FoundationNetworking (curl) both report an
    /// unknown CA, a self-signed or expired certificate as `serverCertificate…` and other handshake failures as
    /// `secureConnectionFailed`; a host name mismatch also reads as `serverCertificateUntrusted` there, unless
    /// ``URLSessionTransport`` evaluated the certificate itself (a private CA), which tells the two apart.
    static func tlsProblem(_ code: URLError.Code) -> TLSProblem? {
        switch code {
        case .serverCertificateUntrusted, .serverCertificateHasUnknownRoot, .serverCertificateHasBadDate,
            .serverCertificateNotYetValid:
            return .untrustedCertificate
        case .secureConnectionFailed, .clientCertificateRejected, .clientCertificateRequired:
            return .handshake
        default:
            return nil
        }
    }

    /// True for a `FerryError` made from a TLS failure: retrying with the same trust settings does not help.
    package static func isTLS(_ error: FerryError) -> Bool { tlsProblem(error.underlying) != nil }

    /// The `FerryError` for a TLS failure: retrying with the same trust settings does not help.
    private static func tlsError(_ problem: TLSProblem, _ error: any Error, url: String) -> FerryError {
        let host = URLHost.of(url)
        switch problem {
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
        }
    }

    /// An error in words a person reads: what a transport classified, a `URLError` ("connection refused" rather than
    /// "Could not connect to the server."), else the error as it describes itself.
    static func plainReason(_ error: any Error) -> String {
        if let classified = error as? ClassifiedTransportFailure {
            return classified.reason ?? plainReason(classified.cause)
        }
        if let url = error as? URLError { return plainReason(url) }
        return "\(error)"
    }

    /// A `URLError` in words a person reads ("connection refused" rather than "Could not connect to the server.").
    /// Anything not recognised is described as is.
    static func plainReason(_ error: URLError) -> String {
        switch error.code {
        case .cannotConnectToHost:
            return "connection refused: nothing listens there (is the server running, and is the port right?)"
        case .networkConnectionLost: return "the connection was reset"
        case .notConnectedToInternet: return "this device is not connected to a network"
        case .cannotFindHost, .dnsLookupFailed: return "the host name cannot be resolved"
        case .timedOut: return "the connection timed out"
        case .internationalRoamingOff, .dataNotAllowed, .callIsActive:
            return "the device does not allow data on this network now"
        default: return error.localizedDescription
        }
    }
}

/// `host:port` of a URL string, for messages (never the user info, path or query).
package enum URLHost {
    package static func of(_ url: String) -> String {
        guard let parsed = URL(string: url), let host = parsed.host else { return "the server" }
        return parsed.port.map { "\(host):\($0)" } ?? host
    }
}

extension TransportFailure {
    /// Whether an upload that failed with `error` may succeed if sent again: the server could not be reached, or
    /// failed, and not for a certificate (the same request would be refused again).
    static func isWorthRetrying(_ error: FerryError) -> Bool {
        error.code == .offline || (error.code == .network && !isTLS(error))
    }
}
