import FerryCore
import Foundation

/// The CA certificates an HTTPS client trusts *instead of* the system's trust store: a private CA that signed the
/// Ferry server's certificate (`ferry fetch --ca ca.pem`). Read and checked once, when created; kept as DER bytes,
/// which every TLS stack takes (Security's `SecCertificateCreateWithData`, NIOSSL in FerryClientNIO).
///
/// ```swift
/// let ca = try TrustedCertificates(pemFile: URL(fileURLWithPath: "/etc/ferry/ca.pem"))
/// config.transport = try URLSessionTransport(trusting: ca)     // Apple platforms; on Linux, FerryClientNIO
/// let client = try await FerryClient.open(configuration: config, logger: logger)
/// ```
public struct TrustedCertificates: Sendable {
    /// The PEM file the certificates came from.
    public let pemFile: URL
    /// The certificates' DER bytes, in file order (a PEM file may hold several).
    public let derCertificates: [Data]

    /// Reads every certificate in `pemFile`. Throws a `FerryError` naming the file when it is missing, unreadable, or
    /// holds no PEM certificate (a private key, a DER file, garbage).
    public init(pemFile: URL) throws {
        self.pemFile = pemFile
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: pemFile.path, isDirectory: &isDirectory), !isDirectory.boolValue
        else {
            throw FerryError(
                .notFound,
                "the CA file does not exist: pass a PEM file with the certificate of the CA that signed the server's certificate",
                path: pemFile.path)
        }
        guard FileManager.default.isReadableFile(atPath: pemFile.path) else {
            throw FerryError(.io, "the CA file cannot be read (permissions)", path: pemFile.path)
        }
        let text: String
        do {
            text = String(decoding: try Data(contentsOf: pemFile), as: UTF8.self)
        } catch {
            throw FerryError(.io, "the CA file cannot be read", path: pemFile.path, underlying: error)
        }
        derCertificates = try Self.parsePEM(text, path: pemFile.path)
        if derCertificates.isEmpty {
            throw FerryError(
                .badInput,
                "not a PEM certificate file: expected one or more '-----BEGIN CERTIFICATE-----' blocks (convert DER with `openssl x509 -inform der -in ca.der -out ca.pem`)",
                path: pemFile.path)
        }
    }

    /// The DER bytes of each `CERTIFICATE` block of a PEM text (RFC 7468); other blocks (keys) are skipped. A block
    /// whose base64 does not decode, or whose bytes are not a DER SEQUENCE, is an error naming the file.
    static func parsePEM(_ text: String, path: String) throws -> [Data] {
        let begin = "-----BEGIN CERTIFICATE-----"
        let end = "-----END CERTIFICATE-----"
        var certificates: [Data] = []
        var rest = Substring(text)
        while let start = rest.range(of: begin) {
            guard let stop = rest.range(of: end, range: start.upperBound..<rest.endIndex) else {
                throw FerryError(.badInput, "a certificate block in the CA file has no '\(end)' line", path: path)
            }
            let base64 = rest[start.upperBound..<stop.lowerBound].filter { !$0.isWhitespace }
            // A DER certificate is a SEQUENCE (0x30) of at least a few bytes.
            guard let der = Data(base64Encoded: String(base64)), der.count > 16, der.first == 0x30 else {
                throw FerryError(
                    .badInput,
                    "certificate \(certificates.count + 1) in the CA file is not valid base64 DER: is the file cut or edited?",
                    path: path)
            }
            certificates.append(der)
            rest = rest[stop.upperBound...]
        }
        return certificates
    }
}
