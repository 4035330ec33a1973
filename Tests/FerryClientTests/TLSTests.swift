import FerryCore
import FerryServer
import Foundation
import Hummingbird
import HummingbirdTesting
import Testing

@testable import FerryClient

/// HTTPS: `ferry serve --tls-cert --tls-key` with the committed test certificates (Tests/Fixtures/tls).
@Suite struct TLSTests {
    static let fixtures = TestPaths.packageRoot.appendingPathComponent("Tests/Fixtures/tls")
    static let ca = fixtures.appendingPathComponent("ca.pem")
    static let otherCA = fixtures.appendingPathComponent("other-ca.pem")
    static let serverCertificate = fixtures.appendingPathComponent("server.pem")
    static let serverKey = fixtures.appendingPathComponent("server.key")

    @Test func serveOverHTTPSSaysSoAndChecksItsFilesUpFront() async throws {
        let temp = try TemporaryDirectory("ferry-tls")
        defer { temp.remove() }
        let snapshots = SnapshotFixtures(root: temp.appending("store"))
        try snapshots.publish()
        let server = try ServeProcess(
            store: snapshots.store.root, arguments: ["--tls-cert", Self.serverCertificate.path, "--tls-key", Self.serverKey.path])
        defer { server.kill9() }
        #expect(server.url.scheme == "https")

        let garbage = temp.appending("garbage.pem")
        try Data("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n".utf8).write(to: garbage)
        let missing = temp.appending("missing.pem")
        let swapped = ServerConfiguration.TLSSettings(certificateChain: Self.serverKey, privateKey: Self.serverCertificate)
        #expect((#expect(throws: FerryError.self) { try swapped.makeTLSConfiguration() })?.path == Self.serverKey.path)
        let wrongKey = ServerConfiguration.TLSSettings(certificateChain: Self.ca, privateKey: Self.serverKey)
        #expect((#expect(throws: FerryError.self) { try wrongKey.makeTLSConfiguration() })?.path == Self.serverKey.path)

        // The CLI: usage errors (exit 2) naming the option and the file
        let serve = ["serve", "--store", snapshots.store.root.path, "--port", "0"]
        let onlyCert = try runFerry(serve + ["--tls-cert", Self.serverCertificate.path])
        #expect(onlyCert.status == 2 && onlyCert.stderr.contains("--tls-cert needs --tls-key"))
        let onlyKey = try runFerry(serve + ["--tls-key", Self.serverKey.path])
        #expect(onlyKey.status == 2 && onlyKey.stderr.contains("--tls-key needs --tls-cert"))
        let missingKey = try runFerry(serve + ["--tls-cert", Self.serverCertificate.path, "--tls-key", missing.path])
        #expect(missingKey.status == 2 && missingKey.stderr.contains(missing.path))
        let badCert = try runFerry(serve + ["--tls-cert", garbage.path, "--tls-key", Self.serverKey.path])
        #expect(badCert.status == 2 && badCert.stderr.contains("--tls-cert") && badCert.stderr.contains(garbage.path))
    }
}
