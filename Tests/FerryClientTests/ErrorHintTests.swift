import FerryCore
import FerryStore
import Foundation
import Testing

@testable import FerryClient

/// The library's errors name library settings; `ferry` adds the option that fixes them, in one place.
@Suite struct ErrorHintTests {
    @Test func libraryMessagesNameSettingsNotFlags() async throws {
        // Given a client without a server URL
        let temp = try TemporaryDirectory("ferry-hints")
        defer { temp.remove() }
        var configuration = FerryClient.Configuration(directory: temp.appending("client"))
        configuration.push.onOpen = false
        let client = try await FerryClient.open(configuration: configuration, logger: .test)

        // When it fetches, the error names Configuration.serverURL, and no flag
        let error = await #expect(throws: FerryError.self) { try await client.checkForUpdates() }
        await client.close()
        #expect(error?.code == .badInput && error?.key == "serverURL")
        #expect(error?.message.contains("Configuration.serverURL") == true)
        #expect(error?.message.contains("--") == false)

        // And a 404 names the settings too
        let notFound = #expect(throws: FerryError.self) {
            try ResponsePlan.decide(
                head: TransportResponseHead(status: 404, headers: [:]), resumeFrom: nil, partial: nil, url: "http://x/")
        }
        #expect(notFound?.key == "dataset" && notFound?.message.contains("Configuration.dataset") == true)
        #expect(notFound?.message.contains("--") == false)
    }

    /// No string literal in FerryClient names a command-line flag (doc comments may mention the CLI).
    @Test func noFlagInLibraryStrings() throws {
        let sources = TestPaths.packageRoot.appendingPathComponent("Sources/FerryClient")
        let files =
            FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?.compactMap { $0 as? URL }
            ?? []
        let flag = try Regex(#""([^"]*[^\w"-])?--[a-z][^"]*""#)
        var offenders: [String] = []
        for file in files where file.pathExtension == "swift" {
            for (number, line) in try String(contentsOf: file, encoding: .utf8).split(separator: "\n").enumerated() {
                let code = line.trimmingCharacters(in: .whitespaces)
                if code.hasPrefix("//") { continue }
                if code.contains(flag) { offenders.append("\(file.lastPathComponent):\(number + 1): \(code)") }
            }
        }
        #expect(files.contains { $0.pathExtension == "swift" })
        #expect(offenders.isEmpty, "\(offenders.joined(separator: "\n"))")
    }

    @Test func cliAddsTheFlagThatFixesIt() async throws {
        let temp = try TemporaryDirectory("ferry-hints")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        try fixtures.publish()
        let dir = temp.appending("client").path

        // A dataset the server does not have: the library's 404, then the flags to check
        try await withFerryServer(store: fixtures.store.root) { url, _ in
            let result = try await runFerry([
                "fetch", "--server", url.absoluteString, "--dataset", "nosuch", "--dir", dir,
            ])
            #expect(result.status == 1)
            #expect(
                result.stderr.contains("(HTTP 404)") && result.stderr.contains("Configuration.dataset"),
                "\(result.stderr)")
            #expect(result.stderr.contains("; check --server and --dataset"), "\(result.stderr)")
            #expect(result.stderr.trimmingCharacters(in: .newlines).split(separator: "\n").count == 1)
        }

        // A directory without database.db: exec says how to make one
        let exec = try await runFerry(["exec", "--dir", dir, "SELECT 1"])
        #expect(exec.status == 1)
        #expect(exec.stderr.contains("there is no database.db yet"), "\(exec.stderr)")
        #expect(
            exec.stderr.contains("run `ferry fetch --server URL --dataset NAME --dir DIR` once online"),
            "\(exec.stderr)")

        // A server that is not running: plain words, not the socket library's text
        let port = try BadNetworkTests.freePort()
        let refused = try await runFerry([
            "fetch", "--server", "http://127.0.0.1:\(port)", "--dataset", "trips", "--dir", dir,
        ])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("connection refused: nothing listens there"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("errno"), "\(refused.stderr)")

        // A template that is not there: the file, then the flag
        let missing = try await runFerry([
            "publish", "--config", temp.appending("nope.yml").path, "--database-url", "postgres://x@127.0.0.1:1/x",
            "--store", dir,
        ])
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("nope.yml: cannot read the template file"), "\(missing.stderr)")
        #expect(missing.stderr.contains("pass the template with --config FILE"), "\(missing.stderr)")
    }
}
