import FerryClientNIO
import FerryCore
import FerryPublisher
import FerryServer
import FerryStore
import Foundation
import Testing

@testable import FerryClient

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `ferry watch` against the real server and publisher: each version arrives through the manifest long-poll, by
/// patch, moments after it is published; SIGINT and SIGTERM end it with 0.
@Suite(.serialized) struct WatchCommandTests {
    /// `ferry watch` as a child process, its stdout read line by line as it comes.
    final class WatchProcess: @unchecked Sendable {
        let process = Process()
        private let lock = NSLock()
        private var buffer = ""
        private var lines: [String] = []
        private var errors = ""

        init(_ arguments: [String]) throws {
            process.executableURL = TestPaths.ferryBinary
            process.arguments = ["watch"] + arguments
            let out = Pipe()
            let err = Pipe()
            process.standardOutput = out
            process.standardError = err
            process.standardInput = FileHandle.nullDevice
            out.fileHandleForReading.readabilityHandler = { [weak self] handle in
                let data = handle.availableData
                guard let self, !data.isEmpty else { return }
                self.lock.withLock {
                    self.buffer += String(decoding: data, as: UTF8.self)
                    while let newline = self.buffer.firstIndex(of: "\n") {
                        self.lines.append(String(self.buffer[..<newline]))
                        self.buffer = String(self.buffer[self.buffer.index(after: newline)...])
                    }
                }
            }
            err.fileHandleForReading.readabilityHandler = { [weak self] handle in
                let data = handle.availableData
                guard let self, !data.isEmpty else { return }
                self.lock.withLock { self.errors += String(decoding: data, as: UTF8.self) }
            }
            try process.run()
        }

        var stderr: String { lock.withLock { errors } }

        /// Line `index` (0-based) of stdout, waiting for it up to `timeout`.
        func line(_ index: Int, timeout: Duration = .seconds(30)) async throws -> String {
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                if let line = lock.withLock({ lines.count > index ? lines[index] : nil }) { return line }
                guard process.isRunning else { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            throw FerryError(.network, "ferry watch printed no line \(index + 1) within \(timeout); stderr: \(stderr)")
        }

        /// Sends `signal` and waits (up to 20 s) for the exit status.
        func stop(_ signal: Int32 = SIGINT) async throws -> Int32 {
            kill(process.processIdentifier, signal)
            let deadline = ContinuousClock.now + .seconds(20)
            while process.isRunning {
                guard ContinuousClock.now < deadline else {
                    kill(process.processIdentifier, SIGKILL)
                    throw FerryError(.network, "ferry watch did not stop within 20 s of signal \(signal)")
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            return process.terminationStatus
        }

        deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
    }

    static func json(_ line: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
    }

    @Test("ferry watch applies 5 successive versions as they are published, each by patch, and SIGINT ends it with 0")
    func watchAppliesFiveVersionsByPatch() async throws {
        try await DeltaUpdateTests().withWorld { world, url, _ in
            let dir = world.directory.appending("watched")
            // Given `ferry watch` waiting up to 60 s per check (so only the long-poll can bring a version in time)
            let watch = try WatchProcess([
                "--server", url.absoluteString, "--dataset", "trips", "--dir", dir.path, "--wait", "60", "--json",
            ])
            // Then the first line is the initial sync of version 1
            let first = try Self.json(try await watch.line(0))
            #expect(first["result"] as? String == "initialSync" && first["version"] as? Int == 1, "\(first)")
            for version in 2...6 {
                // When a row changes and a version is published
                try world.sql(
                    #"UPDATE trips SET passengers = passengers + 1, "updatedAt" = now() WHERE id = 'row-000\#(version)'"#
                )
                let published = ContinuousClock.now
                #expect(try await world.publish().version == version)
                // Then ferry watch prints it, applied, arrived by patch, long before its 60 s wait would end
                let line = try Self.json(try await watch.line(version - 1, timeout: .seconds(45)))
                #expect(ContinuousClock.now - published < .seconds(45))
                #expect(line["result"] as? String == "updateDownloaded" && line["applied"] as? Bool == true, "\(line)")
                #expect(line["version"] as? Int == version && line["state"] as? String == "upToDate", "\(line)")
                #expect(
                    line["path"] as? String == "patch" && line["patchFrom"] as? Int == version - 1
                        && line["patchTo"] as? Int == version, "\(line)")
            }
            // When it is interrupted, it exits 0 at once, though it was waiting on the server
            let stopped = ContinuousClock.now
            #expect(try await watch.stop(SIGINT) == 0, "\(watch.stderr)")
            #expect(ContinuousClock.now - stopped < .seconds(10))
            // And the directory holds version 6, its rows exactly as published
            let client = try await world.client("watched", server: url)
            try await DeltaUpdateTests.expectHolds(client, try world.manifest(), world)
            await client.close()
        }
    }

    @Test(
        "ferry watch --apply-mode on-request leaves each version pending, one text line per version; SIGTERM ends it with 0"
    )
    func watchOnRequestLeavesPending() async throws {
        let temp = try TemporaryDirectory("ferry-watch")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        try fixtures.publish(rows: 5)
        try await withFerryServer(store: fixtures.store.root) { url, _ in
            let dir = temp.appending("device")
            let watch = try WatchProcess([
                "--server", url.absoluteString, "--dataset", fixtures.dataset, "--dir", dir.path, "--apply-mode",
                "on-request", "--wait", "60",
            ])
            #expect(try await watch.line(0).hasPrefix("initial sync: version 1"))
            try fixtures.publish(rows: 6)
            let second = try await watch.line(1, timeout: .seconds(20))
            #expect(second.hasPrefix("downloaded version 2") && second.contains("waits as updated.db"), "\(second)")
            #expect(try await watch.stop(SIGTERM) == 0, "\(watch.stderr)")
            let status = try await runFerry(["status", "--dir", dir.path, "--json"])
            #expect(
                status.stdout.contains(#""version":1"#) && status.stdout.contains(#""pendingVersion":2"#),
                "\(status.stdout)")
        }
    }
}
