import FerryCore
import Foundation
import NIOSSL

/// The CA certificates an HTTPS client trusts *instead of* the system's trust store: a private CA that signed the
/// Ferry server's certificate (`ferry fetch --ca ca.pem`). Loaded and checked once, when created.
///
/// ```swift
/// let ca = try TrustedCertificates(pemFile: URL(fileURLWithPath: "/etc/ferry/ca.pem"))
/// let http = AsyncHTTPClientTransport.makeHTTPClient(trusting: ca)
/// let client = try await FerryClient.open(configuration: config, logger: logger,
///                                         transport: AsyncHTTPClientTransport(client: http))
/// ```
public struct TrustedCertificates: Sendable {
    /// The PEM file the certificates came from.
    public let pemFile: URL
    /// The certificates, in file order (a PEM file may hold several).
    public let certificates: [NIOSSLCertificate]

    /// Reads every certificate in `pemFile`. Throws a `FerryError` naming the file when it is missing, unreadable, or
    /// holds no PEM certificate (a private key, a DER file, garbage).
    public init(pemFile: URL) throws {
        self.pemFile = pemFile
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: pemFile.path, isDirectory: &isDirectory), !isDirectory.boolValue else {
            throw FerryError(
                .notFound, "the CA file does not exist: pass a PEM file with the certificate of the CA that signed the server's certificate",
                path: pemFile.path)
        }
        guard FileManager.default.isReadableFile(atPath: pemFile.path) else {
            throw FerryError(.io, "the CA file cannot be read (permissions)", path: pemFile.path)
        }
        do {
            certificates = try NIOSSLCertificate.fromPEMFile(pemFile.path)
        } catch {
            throw FerryError(
                .badInput,
                "not a PEM certificate file: expected one or more '-----BEGIN CERTIFICATE-----' blocks (convert DER with `openssl x509 -inform der -in ca.der -out ca.pem`)",
                path: pemFile.path, underlying: error)
        }
        if certificates.isEmpty {
            throw FerryError(.badInput, "the CA file holds no certificate", path: pemFile.path)
        }
    }

    /// A client TLS configuration that trusts exactly these certificates (full verification, host name included).
    var tlsConfiguration: TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.trustRoots = .certificates(certificates)
        return configuration
    }
}
