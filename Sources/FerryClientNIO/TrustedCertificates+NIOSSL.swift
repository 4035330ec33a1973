import FerryClient
import FerryCore
import Foundation
import NIOSSL

extension TrustedCertificates {
    /// The certificates as NIOSSL reads them; throws a `FerryError` naming the file when BoringSSL refuses one.
    ///
    /// ```swift
    /// let roots = try TrustedCertificates(pemFile: caURL).nioCertificates()
    /// ```
    public func nioCertificates() throws -> [NIOSSLCertificate] {
        do {
            return try derCertificates.map { try NIOSSLCertificate(bytes: Array($0), format: .der) }
        } catch {
            throw FerryError(
                .badInput,
                "not a PEM certificate file: expected one or more '-----BEGIN CERTIFICATE-----' blocks (convert DER with `openssl x509 -inform der -in ca.der -out ca.pem`)",
                path: pemFile.path, underlying: error)
        }
    }

    /// A client TLS configuration that trusts exactly these certificates (full verification, host name included).
    func tlsConfiguration() throws -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.trustRoots = .certificates(try nioCertificates())
        return configuration
    }
}
