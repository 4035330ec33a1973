import FerryCore
import Foundation
import Testing

@testable import FerryClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// How URLSession's failures become FerryErrors: the `URLError` codes Apple's URLSession uses, and the curl messages
/// FoundationNetworking puts in `URLError(.unknown)` (the TLS test meets the untrusted one against a real server;
/// the others cannot be provoked on Linux without a trusted CA).
@Suite struct TransportFailureTests {
    static let url = "https://ferry.example.org:8443/v1/datasets/trips/manifest"

    static func classified(_ error: URLError) -> FerryError {
        URLSessionTransport.failure(error, url: url, tlsProblem: nil)
    }

    static func curl(_ message: String) -> URLError {
        URLError(.unknown, userInfo: [NSLocalizedDescriptionKey: message])
    }

    @Test func appleCodesAndCurlMessagesNameTheTLSProblem() {
        let cases: [(URLError, TLSProblem?)] = [
            (URLError(.serverCertificateUntrusted), .untrustedCertificate),
            (URLError(.serverCertificateHasUnknownRoot), .untrustedCertificate),
            (URLError(.serverCertificateHasBadDate), .untrustedCertificate),
            (URLError(.secureConnectionFailed), .handshake),
            (Self.curl("SSL certificate problem: unable to get local issuer certificate"), .untrustedCertificate),
            (
                Self.curl("SSL: no alternative certificate subject name matches target host name 'localhost'"),
                .wrongHost
            ),
            (Self.curl("OpenSSL SSL_connect: SSL_ERROR_SYSCALL in connection to 127.0.0.1:8443"), .handshake),
            (URLError(.cannotConnectToHost), nil),
            (URLError(.timedOut), nil),
            (Self.curl("Could not resolve host: nowhere.invalid"), nil),
        ]
        for (error, problem) in cases {
            let ferry = Self.classified(error)
            #expect(ferry.tlsProblem == problem, "\(error.localizedDescription)")
            #expect(ferry.code == (problem == nil ? .offline : .network), "\(error.localizedDescription)")
            #expect(ferry.message.contains("ferry.example.org:8443"))
        }
    }

    @Test func theDelegatesOwnEvaluationWinsOverTheCode() {
        // A private CA on Apple platforms: the delegate refused the certificate for naming another host and cancelled
        let ferry = URLSessionTransport.failure(URLError(.cancelled), url: Self.url, tlsProblem: .wrongHost)
        #expect(ferry.code == .network && ferry.tlsProblem == .wrongHost)
        #expect(ferry.message.contains("does not name ferry.example.org:8443"))
    }

    @Test func offlineReasonsReadAsWords() {
        #expect(Self.classified(URLError(.cannotConnectToHost)).message.contains("connection refused"))
        #expect(Self.classified(URLError(.timedOut)).message.contains("the connection timed out"))
        #expect(Self.classified(URLError(.notConnectedToInternet)).message.contains("not connected to a network"))
        #expect(Self.classified(URLError(.timedOut)).message.contains("offline is normal"))
    }

    @Test func pemBlocksAreReadAndBadOnesNamed() throws {
        let der = Data([0x30, 0x82, 0x01, 0x0A] + Array(repeating: 0x01, count: 32))
        let pem =
            "junk\n-----BEGIN CERTIFICATE-----\n\(der.base64EncodedString(options: .lineLength64Characters))\n-----END CERTIFICATE-----\n"
        #expect(try TrustedCertificates.parsePEM(pem + pem, path: "ca.pem") == [der, der])
        #expect(
            try TrustedCertificates.parsePEM(
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", path: "k.pem"
            ).isEmpty)
        let cut = #expect(throws: FerryError.self) {
            try TrustedCertificates.parsePEM("-----BEGIN CERTIFICATE-----\nMIIB", path: "ca.pem")
        }
        #expect(cut?.code == .badInput && cut?.path == "ca.pem")
    }
}
