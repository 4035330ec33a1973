import FerryCore
import Foundation
import NIOSSL

extension ServerConfiguration {
    /// The certificate chain and private key the server presents for HTTPS (`ferry serve --tls-cert --tls-key`).
    /// Both are PEM files; the chain starts with the server's own certificate, intermediates may follow.
    ///
    /// ```swift
    /// configuration.tls = .init(certificateChain: URL(fileURLWithPath: "server.pem"),
    ///                           privateKey: URL(fileURLWithPath: "server.key"))
    /// ```
    public struct TLSSettings: Sendable, Equatable {
        /// PEM file with the server certificate first, then any intermediate certificates.
        public var certificateChain: URL
        /// PEM file with the private key of the first certificate (unencrypted).
        public var privateKey: URL

        public init(certificateChain: URL, privateKey: URL) {
            self.certificateChain = certificateChain
            self.privateKey = privateKey
        }

        /// Loads both files and checks that the key belongs to the certificate. Throws a `FerryError` naming the file
        /// that is missing or malformed, so a bad setting fails at start rather than at the first handshake.
        ///
        /// ```swift
        /// let tlsConfiguration = try settings.makeTLSConfiguration()
        /// ```
        public func makeTLSConfiguration() throws -> TLSConfiguration {
            try Self.requireFile(certificateChain, what: "TLS certificate")
            try Self.requireFile(privateKey, what: "TLS private key")
            let chain: [NIOSSLCertificate]
            do {
                chain = try NIOSSLCertificate.fromPEMFile(certificateChain.path)
            } catch {
                throw FerryError(
                    .badInput,
                    "not a PEM certificate file: expected '-----BEGIN CERTIFICATE-----' blocks, the server's certificate first",
                    path: certificateChain.path, underlying: error)
            }
            guard !chain.isEmpty else {
                throw FerryError(
                    .badInput, "the TLS certificate file holds no certificate", path: certificateChain.path)
            }
            let key: NIOSSLPrivateKey
            do {
                key = try NIOSSLPrivateKey(file: privateKey.path, format: .pem)
            } catch {
                throw FerryError(
                    .badInput,
                    "not a PEM private key file (an unencrypted '-----BEGIN PRIVATE KEY-----' block is expected)",
                    path: privateKey.path, underlying: error)
            }
            let configuration = TLSConfiguration.makeServerConfiguration(
                certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
            do {
                // Building the context checks that the key matches the certificate.
                _ = try NIOSSLContext(configuration: configuration)
            } catch {
                throw FerryError(
                    .badInput, "the private key does not belong to the certificate in \(certificateChain.path)",
                    path: privateKey.path)
            }
            return configuration
        }

        private static func requireFile(_ url: URL, what: String) throws {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue
            else {
                throw FerryError(.notFound, "the \(what) file does not exist", path: url.path)
            }
            guard FileManager.default.isReadableFile(atPath: url.path) else {
                throw FerryError(.io, "the \(what) file cannot be read (permissions)", path: url.path)
            }
        }
    }

    /// `https` with ``tls``, else `http`: the scheme of the URL the server listens on.
    public var scheme: String { tls == nil ? "http" : "https" }
}
