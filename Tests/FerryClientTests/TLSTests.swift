import AsyncHTTPClient
import FerryClientNIO
import FerryCore
import FerryServer
import FerryStore
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import FerryClient

/// HTTPS end to end: `ferry serve --tls-cert --tls-key` with the committed test certificates (Tests/Fixtures/tls),
/// and clients that trust the private CA (`--ca`, ``TrustedCertificates``), none, or an unrelated one.
@Suite struct TLSTests {
    static let fixtures = TestPaths.packageRoot.appendingPathComponent("Tests/Fixtures/tls")
    static let ca = fixtures.appendingPathComponent("ca.pem")
    static let otherCA = fixtures.appendingPathComponent("other-ca.pem")
    static let serverCertificate = fixtures.appendingPathComponent("server.pem")
    static let serverKey = fixtures.appendingPathComponent("server.key")
    static let untrusted = "TLS: the server's certificate is not trusted"

    @Test func serveOverHTTPSSaysSoAndChecksItsFilesUpFront() async throws {
        let temp = try TemporaryDirectory("ferry-tls")
        defer { temp.remove() }
        let snapshots = SnapshotFixtures(root: temp.appending("store"))
        try snapshots.publish()
        let server = try await ServeProcess(
            store: snapshots.store.root,
            arguments: ["--tls-cert", Self.serverCertificate.path, "--tls-key", Self.serverKey.path])
        defer { server.kill9() }
        #expect(server.url.scheme == "https")

        let garbage = temp.appending("garbage.pem")
        try Data("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n".utf8).write(to: garbage)
        let missing = temp.appending("missing.pem")
        let swapped = ServerConfiguration.TLSSettings(
            certificateChain: Self.serverKey, privateKey: Self.serverCertificate)
        #expect((#expect(throws: FerryError.self) { try swapped.makeTLSConfiguration() })?.path == Self.serverKey.path)
        let wrongKey = ServerConfiguration.TLSSettings(certificateChain: Self.ca, privateKey: Self.serverKey)
        #expect((#expect(throws: FerryError.self) { try wrongKey.makeTLSConfiguration() })?.path == Self.serverKey.path)

        // The CLI: usage errors (exit 2) naming the option and the file
        let serve = ["serve", "--store", snapshots.store.root.path, "--port", "0"]
        let onlyCert = try await runFerry(serve + ["--tls-cert", Self.serverCertificate.path])
        #expect(onlyCert.status == 2 && onlyCert.stderr.contains("--tls-cert needs --tls-key"))
        let onlyKey = try await runFerry(serve + ["--tls-key", Self.serverKey.path])
        #expect(onlyKey.status == 2 && onlyKey.stderr.contains("--tls-key needs --tls-cert"))
        let missingKey = try await runFerry(
            serve + ["--tls-cert", Self.serverCertificate.path, "--tls-key", missing.path])
        #expect(missingKey.status == 2 && missingKey.stderr.contains(missing.path))
        let badCert = try await runFerry(serve + ["--tls-cert", garbage.path, "--tls-key", Self.serverKey.path])
        #expect(badCert.status == 2 && badCert.stderr.contains("--tls-cert") && badCert.stderr.contains(garbage.path))
    }

    @Test func fetchOverHTTPSTrustsOnlyTheGivenCA() async throws {
        let temp = try TemporaryDirectory("ferry-tls")
        defer { temp.remove() }
        let snapshots = SnapshotFixtures(root: temp.appending("store"))
        let v1 = try snapshots.publish(rows: 5)
        let server = try await ServeProcess(
            store: snapshots.store.root,
            arguments: ["--tls-cert", Self.serverCertificate.path, "--tls-key", Self.serverKey.path])
        defer { server.kill9() }
        #expect(server.url.scheme == "https")
        let dir = ClientDirectory(temp.appending("client"))
        let fetch = [
            "fetch", "--server", server.url.absoluteString, "--dataset", snapshots.dataset, "--dir", dir.url.path,
        ]

        // Without --ca (the system's trust store) and with an unrelated CA: exit 1, the TLS reason, nothing installed
        for extra in [[], ["--ca", Self.otherCA.path]] {
            let started = ContinuousClock.now
            let refused = try await runFerry(fetch + extra)
            // Reported at once: the handshake is not retried until the connect timeout (10 s). This times the whole
            // process (start, exit) as well; clientLibraryOverHTTPSWithAPrivateCA times the call alone against 1 s.
            #expect(ContinuousClock.now - started < .seconds(8), "took \(ContinuousClock.now - started)")
            #expect(refused.status == 1)
            #expect(refused.stderr.contains(Self.untrusted), "\(refused.stderr)")
            #expect(refused.stderr.contains("pass --ca with the CA that signed it"))
            #expect(!refused.stderr.contains("offline is normal"))
            #expect(!dir.exists(dir.database) && !dir.exists(dir.updated) && !dir.exists(dir.partial))
        }

        // With the CA that signed the server's certificate: the snapshot arrives and verifies
        let fetched = try await runFerry(fetch + ["--ca", Self.ca.path, "--json"])
        #expect(fetched.status == 0, "\(fetched.stderr)")
        #expect(fetched.stdout.contains(#""result":"initialSync""#))
        #expect(fetched.stdout.contains(#""sha256":"\#(v1.sha256)""#))
        #expect(try publishedVersion(of: dir.database, among: [v1]) == 1)

        // A later refusal leaves version 1 and downloads nothing
        let v2 = try snapshots.publish(rows: 6)
        #expect(
            try await Self.waitForVersion(2, of: snapshots.dataset, at: server.url), "the server never served version 2"
        )
        let refused = try await runFerry(fetch + ["--ca", Self.otherCA.path])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains(Self.untrusted))
        #expect(try publishedVersion(of: dir.database, among: [v1, v2]) == 1)
        #expect(!dir.exists(dir.updated) && !dir.exists(dir.partial))
        #expect(try await runFerry(fetch + ["--ca", Self.ca.path, "--apply"]).status == 0)
        #expect(try publishedVersion(of: dir.database, among: [v1, v2]) == 2)
    }

    @Test(arguments: TransportKind.allCases) func clientLibraryOverHTTPSWithAPrivateCA(_ kind: TransportKind)
        async throws
    {
        let temp = try TemporaryDirectory("ferry-tls")
        defer { temp.remove() }
        let snapshots = SnapshotFixtures(root: temp.appending("store"))
        let v1 = try snapshots.publish(rows: 5)
        var configuration = ServerConfiguration(storePath: snapshots.store.root, port: 0)
        configuration.tls = .init(certificateChain: Self.serverCertificate, privateKey: Self.serverKey)
        let app = try await buildApplication(configuration, logger: .test)
        try await app.test(.ahc(.https)) { client in
            let url = URL(string: "https://127.0.0.1:\(client.port!)")!
            let batch = ChangeBatch(clientId: "device", sentAt: Timestamp.format(Date()), changes: [])

            // The system's trust store (no CA given), then an unrelated CA: a network error that names the fix, for
            // downloads and uploads alike, within 1 s of the call. The connect timeout is the default 10 s: a
            // handshake retried until it (as AsyncHTTPClient does unless told not to) would take 10 s, so the 1 s
            // bound proves the TLS error is reported at once.
            // (URLSession on Linux cannot take a CA at all: the last part checks it says so)
            for ca in kind.trustsPrivateCA ? [nil, Self.otherCA] : [nil] {
                let other = try kind.make(trusting: try ca.map { try TrustedCertificates(pemFile: $0) })
                let refusing = try await FerryClient.open(
                    configuration: .init(
                        directory: temp.appending("refused"), serverURL: url, dataset: snapshots.dataset
                    ).using(other.snapshot), logger: .test)
                let checkStarted = ContinuousClock.now
                let error = await #expect(throws: FerryError.self) { try await refusing.checkForUpdates() }
                let checkTime = ContinuousClock.now - checkStarted
                #expect(checkTime < .seconds(6), "the TLS error took \(checkTime)")
                #expect(
                    error?.code == .network, "\(String(describing: error)) \(String(describing: error?.underlying))")
                #expect(error?.message.hasPrefix(Self.untrusted) == true, "\(String(describing: error))")
                #expect(error?.tlsProblem == .untrustedCertificate)
                #expect(try await refusing.status().state == .initialSyncRequired)
                await refusing.close()
                let uploadStarted = ContinuousClock.now
                let uploadError = await #expect(throws: FerryError.self) {
                    try await other.uploader(server: url).upload(batch, dataset: snapshots.dataset)
                }
                let uploadTime = ContinuousClock.now - uploadStarted
                #expect(uploadTime < .seconds(6), "the TLS error took \(uploadTime)")
                #expect(uploadError?.code == .network)
                #expect(uploadError?.message.hasPrefix(Self.untrusted) == true, "\(String(describing: uploadError))")
                try await other.shutdown()
            }

            // The CA that signed it: the initial sync over HTTPS, verified end to end
            let ca = try TrustedCertificates(pemFile: Self.ca)
            guard kind.trustsPrivateCA else {
                // URLSession on Linux: FoundationNetworking cannot trust a private CA, and says so up front
                let refused = #expect(throws: FerryError.self) {
                    try kind.make(connectTimeout: .seconds(1), trusting: ca)
                }
                #expect(refused?.code == .badInput && refused?.message.contains("FerryClientNIO") == true)
                return
            }
            let http = try kind.make(connectTimeout: .seconds(1), trusting: ca)
            let trusting = try await FerryClient.open(
                configuration: .init(directory: temp.appending("trusted"), serverURL: url, dataset: snapshots.dataset)
                    .using(http.snapshot), logger: .test)
            let result = try await trusting.checkForUpdates()
            #expect(result.outcome == .initialSync)
            #expect(result.download?.sha256 == v1.sha256)
            #expect(try publishedVersion(of: trusting.directory.database, among: [v1]) == 1)
            await trusting.close()
            // Uploads reach the server through the same client (this server has no changes endpoint: 404)
            let reached = await #expect(throws: FerryError.self) {
                try await http.uploader(server: url).upload(batch, dataset: snapshots.dataset)
            }
            #expect(reached?.code == .badInput)
            #expect(reached?.message.contains("(404)") == true)
            try await http.shutdown()
        }
    }

    /// Waits up to 20 s for the HTTPS server at `url` (its certificate signed by the test CA) to serve `version` of
    /// `dataset`.
    static func waitForVersion(_ version: Int, of dataset: String, at url: URL) async throws -> Bool {
        let http = try AsyncHTTPClientTransport.makeHTTPClient(trusting: try TrustedCertificates(pemFile: ca))
        let manifest = HTTPClientRequest(
            url: url.appendingPathComponent("v1/datasets/\(dataset)/manifest").absoluteString)
        var served = false
        let deadline = ContinuousClock.now + .seconds(20)
        while !served, ContinuousClock.now < deadline {
            if let response = try? await http.execute(manifest, timeout: .seconds(5)),
                let body = try? await response.body.collect(upTo: 1 << 20),
                let decoded = try? Manifest.decode(Data(body.readableBytesView))
            {
                served = decoded.version >= version
            }
            if !served { try await Task.sleep(for: .milliseconds(50)) }
        }
        try await http.shutdown()
        return served
    }

    @Test func caFilesAreCheckedUpFrontAndNamed() async throws {
        let temp = try TemporaryDirectory("ferry-tls")
        defer { temp.remove() }
        let garbage = temp.appending("garbage.pem")
        try Data("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n".utf8).write(to: garbage)
        let missing = temp.appending("missing.pem")

        // The library names the file and says what is wrong
        #expect(try TrustedCertificates(pemFile: Self.ca).derCertificates.count == 1)
        #expect(try TrustedCertificates(pemFile: Self.ca).nioCertificates().count == 1)
        let notFound = #expect(throws: FerryError.self) { try TrustedCertificates(pemFile: missing) }
        #expect(notFound?.code == .notFound && notFound?.path == missing.path)
        for file in [garbage, Self.serverKey] {
            let malformed = #expect(throws: FerryError.self) { try TrustedCertificates(pemFile: file) }
            #expect(malformed?.code == .badInput && malformed?.path == file.path)
        }

        // The CLI: usage errors (exit 2) naming the option and the file
        let fetch = [
            "fetch", "--server", "https://127.0.0.1:9", "--dataset", "trips", "--dir", temp.appending("client").path,
        ]
        for file in [missing, garbage] {
            let result = try await runFerry(fetch + ["--ca", file.path])
            #expect(result.status == 2)
            #expect(result.stderr.contains("--ca") && result.stderr.contains(file.path))
        }
        #expect(
            try await runFerry([
                "push", "--server", "https://127.0.0.1:9", "--dataset", "trips", "--dir", temp.url.path, "--ca",
                missing.path,
            ]).status == 2)
    }
}
