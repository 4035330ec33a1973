import FerryCore
import Foundation
import Testing

@testable import FerryClient

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The `ferry` client subcommands as a user runs them: output, exit codes, and kill -9 during apply.
@Suite struct ClientCLITests {
    @Test func statusJSONGolden() async throws {
        let temp = try TemporaryDirectory("ferry-cli")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        let v1 = try fixtures.publish()
        let v2 = try fixtures.publish()
        let dir = ClientDirectory(temp.appending("client"))

        // A directory that does not exist yet needs the initial sync.
        var result = try await runFerry(["status", "--dir", dir.url.path, "--json"])
        #expect(result.status == 0)
        #expect(
            result.stdout
                == #"{"state":"initialSyncRequired","version":null,"sha256":null,"pendingVersion":null,"pendingSha256":null,"outbox":0,"path":null,"patchFrom":null,"patchTo":null,"ownRowsSettled":null,"device":null}"#
                + "\n")

        try dir.create()
        try FileManager.default.copyItem(at: fixtures.snapshotFile(1), to: dir.database)
        result = try await runFerry(["status", "--dir", dir.url.path, "--json"])
        #expect(
            result.stdout
                == #"{"state":"upToDate","version":1,"sha256":"\#(v1.sha256)","pendingVersion":null,"pendingSha256":null,"outbox":0,"path":null,"patchFrom":null,"patchTo":null,"ownRowsSettled":null,"device":null}"#
                + "\n")

        try FileManager.default.copyItem(at: fixtures.snapshotFile(2), to: dir.updated)
        result = try await runFerry(["status", "--dir", dir.url.path, "--json"])
        #expect(
            result.stdout
                == #"{"state":"updatePending","version":1,"sha256":"\#(v1.sha256)","pendingVersion":2,"pendingSha256":"\#(v2.sha256)","outbox":0,"path":null,"patchFrom":null,"patchTo":null,"ownRowsSettled":null,"device":null}"#
                + "\n")
        // status never applies anything
        #expect(dir.exists(dir.updated))

        result = try await runFerry(["status", "--dir", dir.url.path])
        #expect(result.stdout.hasPrefix("state: updatePending\nversion: 1 (sha256 \(v1.sha256))\npending: version 2"))

        // apply, then rollback, through the CLI
        result = try await runFerry(["apply", "--dir", dir.url.path, "--json"])
        #expect(result.status == 0)
        #expect(
            result.stdout
                == #"{"state":"upToDate","version":2,"sha256":"\#(v2.sha256)","pendingVersion":null,"pendingSha256":null,"outbox":0,"applied":true}"#
                + "\n")
        result = try await runFerry(["apply", "--dir", dir.url.path])
        #expect(result.status == 0)
        #expect(result.stdout.hasPrefix("nothing to apply"))
        result = try await runFerry(["rollback", "--dir", dir.url.path])
        #expect(result.status == 0)
        #expect(result.stdout.hasPrefix("rolled back version 2 to version 1"))
    }

    @Test func exitCodesAndOneLineErrors() async throws {
        let temp = try TemporaryDirectory("ferry-cli")
        defer { temp.remove() }
        // Usage errors: 2
        #expect(try await runFerry(["status"]).status == 2)
        #expect(
            try await runFerry(["fetch", "--server", "ftp://x", "--dataset", "trips", "--dir", temp.url.path]).status
                == 2)
        #expect(
            try await runFerry(["fetch", "--server", "http://127.0.0.1:1", "--dataset", "../x", "--dir", temp.url.path])
                .status == 2)
        // A schema line instead of the dataset: the usage error says what to give instead.
        let line = try await runFerry(
            ["fetch", "--server", "http://127.0.0.1:1", "--dataset", "trips.v2", "--dir", temp.url.path])
        #expect(line.status == 2 && line.stderr.contains("--dataset trips, and the line with --accept-schema 2"))
        // Failures: 1 with one line on stderr
        try FileManager.default.createDirectory(at: temp.appending("c"), withIntermediateDirectories: true)
        let rollback = try await runFerry(["rollback", "--dir", temp.appending("c").path])
        #expect(rollback.status == 1)
        #expect(rollback.stderr.contains("nothing to roll back"))
        #expect(rollback.stderr.trimmingCharacters(in: .newlines).split(separator: "\n").count == 1)
        // Takes the 10 s connect timeout: off the cooperative pool.
        let offline = try await runFerry([
            "fetch", "--server", "http://127.0.0.1:9", "--dataset", "trips", "--dir", temp.url.path,
        ])
        #expect(offline.status == 1)
        #expect(offline.stderr.contains("offline is normal"))
        #expect(offline.stderr.trimmingCharacters(in: .newlines).split(separator: "\n").count == 1)
    }

    /// kill -9 of `ferry apply` at random instants: database.db is always one complete published version and the
    /// next apply finishes the job.
    @Test func killDuringApply() async throws {
        let temp = try TemporaryDirectory("ferry-cli")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        let published = [try fixtures.publish(rows: 10, blobMiB: 2), try fixtures.publish(rows: 20, blobMiB: 2)]
        let dir = ClientDirectory(temp.appending("client"))
        var outcomes: [Int: Int] = [:]
        for round in 0..<16 {
            // Given version 1 live and version 2 pending
            try? FileManager.default.removeItem(at: dir.url)
            try dir.create()
            try FileManager.default.copyItem(at: fixtures.snapshotFile(1), to: dir.database)
            try FileManager.default.copyItem(at: fixtures.snapshotFile(2), to: dir.updated)

            // When `ferry apply` is killed after a random delay
            let process = Process()
            process.executableURL = TestPaths.ferryBinary
            process.arguments = ["apply", "--dir", dir.url.path]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            usleep(UInt32(round * 4_000 + Int.random(in: 0..<4_000)))
            kill(process.processIdentifier, SIGKILL)
            await process.waitForExit()

            // Then database.db is exactly one published version
            let live = try publishedVersion(of: dir.database, among: published)
            #expect(live == 1 || live == 2, "round \(round)")
            outcomes[live ?? 0, default: 0] += 1
            // And the next apply completes the job
            let again = try await runFerry(["apply", "--dir", dir.url.path, "--json"])
            #expect(again.status == 0, "\(again.stderr)")
            #expect(try publishedVersion(of: dir.database, among: published) == 2)
            #expect(try publishedVersion(of: dir.previous, among: published) == 1)
        }
        #expect(outcomes[0] == nil)
    }
}
