import FerryCore
import FerryServer
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOFoundationEssentialsCompat

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The real Ferry server, in process on 127.0.0.1 port 0, for the duration of `body`.
/// `body` gets the base URL and a function that waits until the server serves a given version.
func withFerryServer<T: Sendable>(
    store: URL, dataset: String = "trips", database: ServerConfiguration.DatabaseSettings? = nil,
    statusToken: String? = nil, builds: BuildSettings = BuildSettings(),
    _ body: @Sendable @escaping (_ url: URL, _ waitForVersion: @Sendable (Int) async throws -> Void) async throws -> T
) async throws -> T {
    var configuration = ServerConfiguration(storePath: store, port: 0)
    configuration.builds = builds
    configuration.pollInterval = .milliseconds(100)
    configuration.database = database
    configuration.statusToken = statusToken
    let app = try await buildApplication(configuration, logger: .test)
    return try await app.test(.live) { client in
        let url = URL(string: "http://127.0.0.1:\(client.port!)")!
        let wait: @Sendable (Int) async throws -> Void = { version in
            for _ in 0..<100 {
                let response = try await client.execute(uri: "/v1/datasets/\(dataset)/manifest", method: .get)
                if response.status == .ok, let manifest = try? Manifest.decode(Data(buffer: response.body)),
                    manifest.version >= version
                {
                    return
                }
                try await Task.sleep(for: .milliseconds(50))
            }
            throw FerryError(.network, "the server did not pick up version \(version) within 5 s")
        }
        return try await body(url, wait)
    }
}

/// `ferry serve --port 0` as a separate process (so it can be killed with -9), with the URL it prints
/// (`https://` when `arguments` include `--tls-cert` and `--tls-key`).
final class ServeProcess: @unchecked Sendable {
    let process = Process()
    private(set) var url: URL!
    private let lock = NSLock()
    private var output = ""

    init(store: URL, arguments: [String] = []) async throws {
        process.executableURL = TestPaths.ferryBinary
        process.arguments = ["serve", "--store", store.path, "--port", "0"] + arguments
        let pipe = Pipe()
        process.standardError = pipe
        process.standardOutput = pipe
        pipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            guard let self, !data.isEmpty else { return }
            self.lock.lock()
            self.output += String(decoding: data, as: UTF8.self)
            self.lock.unlock()
        }
        try process.run()
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let text = lock.withLock { output }
            if let range = text.range(of: #"listening on https?://[0-9.]+:\d+"#, options: .regularExpression) {
                url = URL(string: String(text[range].dropFirst("listening on ".count)))
                return
            }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        kill(process.processIdentifier, SIGKILL)
        throw FerryError(.network, "ferry serve did not start: \(output)")
    }

    /// Waits up to 20 s for `server` to serve `version` (or a newer one) of `line` in its manifest; false when it
    /// does not within the deadline.
    static func waitForVersion(_ server: String, _ line: String, _ version: Int) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if let url = URL(string: "\(server)/v1/datasets/\(line)/manifest"),
                let (data, _) = try? await URLSession.shared.data(from: url),
                let manifest = try? Manifest.decode(data), manifest.version >= version
            {
                return true
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    /// ``waitForVersion(_:_:_:)`` against this server.
    func waitForVersion(_ line: String, _ version: Int) async throws -> Bool {
        try await Self.waitForVersion(url.absoluteString, line, version)
    }

    /// kill -9: the server stops mid-whatever, as a crash or a power cut would.
    func kill9() {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    deinit { if process.isRunning { kill9() } }
}
