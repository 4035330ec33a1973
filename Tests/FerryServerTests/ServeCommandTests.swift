import FerryCore
import FerryPostgres
import Foundation
import Testing

@testable import FerryServer

#if canImport(Glibc)
    import FerryStore
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite struct ServeCommandTests {
    @Test func serveAnswersThenDrainsADownloadOnSIGTERMAndExitsZero() async throws {
        // Given a store with a 16 MB snapshot and `ferry serve --port 0`
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish(blobBytes: 16 << 20)
        let process = Process()
        process.executableURL = TestPaths.ferryBinary
        process.arguments = ["serve", "--store", store.store.root.path, "--port", "0", "--drain-timeout", "20"]
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        defer { if process.isRunning { process.terminate() } }

        // When it prints the URL it listens on
        var printed = ""
        while !printed.contains("\n") {
            let data = out.fileHandleForReading.availableData
            if data.isEmpty { break }
            printed += String(decoding: data, as: UTF8.self)
        }
        let line = try #require(
            printed.split(separator: "\n").first { $0.hasPrefix("ferry serve listening on http://127.0.0.1:") })
        let port = try #require(Int(line.split(separator: ":").last ?? ""))

        // Then a 200 and a 304 come back
        let first = try RawHTTPConnection(port: port)
        try first.send(
            "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"\(manifest.sha256)\"\r\n\r\n")
        #expect(try first.readHead().status == 304)

        // And a download in flight when SIGTERM arrives still completes, then the process exits 0
        let download = try RawHTTPConnection(port: port)
        try download.send("GET /v1/datasets/trips/snapshot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        let head = try download.readHead()
        #expect(head.status == 200)
        let length = try #require(Int(head.headers["content-length"] ?? ""))
        var hasher = FileHasher()
        let start = try download.read(1 << 20)
        start.withUnsafeBytes { hasher.update($0) }
        kill(process.processIdentifier, SIGTERM)
        var received = start.count
        while received < length {
            let part = try download.read(min(1 << 20, length - received))
            part.withUnsafeBytes { hasher.update($0) }
            received += part.count
        }
        #expect(hasher.finalizeHex() == manifest.sha256)
        await process.waitForExit()
        #expect(process.terminationStatus == 0)
        let log = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(log.contains("ferry serve listening on http://127.0.0.1:\(port)"))
        #expect(log.contains("trips@1"))
    }

    @Test func usageErrorsExitTwoAndAMissingStoreExitsOne() async throws {
        let missingStore = try await runFerry(["serve"])
        #expect(missingStore.status == 2)
        let urlWithoutConfig = try await runFerry([
            "serve", "--store", "/tmp", "--database-url", "postgres://u:secret@h/db",
        ])
        #expect(urlWithoutConfig.status == 2)
        #expect(urlWithoutConfig.stderr.contains("--database-url needs"))
        #expect(!urlWithoutConfig.stderr.contains("secret"))
        let badPort = try await runFerry(["serve", "--store", "/tmp", "--port", "70000"])
        #expect(badPort.status == 2)
        // A URL of a scheme Ferry has no store for is refused as a usage error, not taken as a local directory
        // named "gs:"
        for command in [["serve"], ["publish", "--config", "t.yml"]] {
            let other = try await runFerry(command + ["--store", "gs://bucket/prefix"])
            #expect(other.status == 2 && other.stderr.contains("not a store Ferry knows"), "\(other.stderr)")
        }
        let nowhere = try await runFerry([
            "serve", "--store", "/nonexistent/ferry-store-\(UUID().uuidString)", "--port", "0",
        ])
        #expect(nowhere.status == 1)
        #expect(nowhere.stderr.contains("snapshot store does not exist"))
    }

    @Test func everyLimitIsAnOptionThatReachesTheServer() async throws {
        // Bad values are usage errors (exit 2) naming the option and the accepted range
        let bad: [(String, String, String)] = [
            ("--download-buffer-bytes", "1048576", "at least 2097152"),
            ("--token-cache-ttl", "-1", "0 (ask PostgreSQL every time) to 3600 seconds"),
            ("--token-cache-ttl", "3601", "0 (ask PostgreSQL every time) to 3600 seconds"),
            ("--merger-connections", "0", "between 1 and 64"),
            ("--merger-connections", "65", "between 1 and 64"),
            ("--retention-sweep-interval", "soon", "e.g. 30s, 15m, 2h or 30d"),
        ]
        for (option, value, range) in bad {
            let run = try await runFerry(["serve", "--store", "/tmp", "--port", "0", "\(option)=\(value)"])
            #expect(run.status == 2, "\(option) \(value): \(run.stderr)")
            #expect(run.stderr.contains(option) && run.stderr.contains(range), "\(option) \(value): \(run.stderr)")
            #expect(
                !run.stderr.contains("every: "),
                "a duration's error names the option, not the library's key: \(run.stderr)")
        }

        // Given a server with the changes endpoint and every new limit set away from its default
        let database = try TestDatabase.create("serve-limits")
        defer { database.drop() }
        try database.connect().execute(
            String(contentsOf: TestPaths.packageRoot.appendingPathComponent("templates/trips.pg.sql"), encoding: .utf8))
        let store = try TestStore()
        defer { store.remove() }
        _ = try store.publish()
        let trips = TestPaths.packageRoot.appendingPathComponent("templates/trips.yml").path
        let log = try await offCooperativePool {
            let process = Process()
            process.executableURL = TestPaths.ferryBinary
            process.arguments = [
                "serve", "--store", store.store.root.path, "--port", "0", "--config", trips, "--database-url",
                database.url,
                "--download-buffer-bytes", "3145728", "--token-cache-ttl", "0.5", "--merger-connections", "3",
                "--retention-sweep-interval", "10m",
            ]
            let out = Pipe()
            let err = Pipe()
            process.standardOutput = out
            process.standardError = err
            try process.run()
            defer { if process.isRunning { process.terminate() } }
            var printed = ""
            while !printed.contains("listening") {
                let data = out.fileHandleForReading.availableData
                if data.isEmpty { break }
                printed += String(decoding: data, as: UTF8.self)
            }
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
            return String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        }

        // Then the limits line it logs at start, read back from the server's configuration, has each value
        let line = try #require(log.split(separator: "\n").first { $0.contains("ferry serve limits") }, "\(log)")
        for expected in [
            "download-buffer-bytes=3145728", "token-cache-ttl=0.5", "merger-connections=3",
            "retention-sweep-interval=600",
            "change-retention=2592000", "max-body-bytes=8388608", "idle-timeout=60",
        ] {
            #expect(line.contains(expected), "\(expected) missing from \(line)")
        }
    }
}
