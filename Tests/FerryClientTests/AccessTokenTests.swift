import FerryClientNIO
import FerryCore
import FerryMerge
import FerryPostgres
import FerryPublisher
import FerryServer
import FerryStore
import Foundation
import Testing

@testable import FerryClient

/// The client half of access rights: the bearer token on every snapshot request and change upload, and a refused
/// token (401/403) that is a typed error, destroys nothing and is not retried. The server is the real Ferry server
/// behind a ``TokenGate``.
@Suite struct AccessTokenTests {
    static let token = "s3cret-Token_0123456789.abc~xyz"
    static let refusedMessage =
        "the server refused the access token (401): re-authenticate (get a new token) and retry; local data and queued edits are kept"

    /// SHA-256 of every file that must survive a refused token, by name (nil when absent).
    static func fingerprint(_ dir: ClientDirectory) -> [String: String?] {
        var out: [String: String?] = [:]
        for file in [dir.database, dir.updated, dir.partial, dir.partialRecord, dir.stateFile] {
            let digest: String? = dir.exists(file) ? try? FileDigest.sha256Hex(of: file) : nil
            out.updateValue(digest, forKey: file.lastPathComponent)
        }
        return out
    }

    static func refusal(_ body: () async throws -> Void) async -> FerryError? {
        do {
            try await body()
            return nil
        } catch let error as FerryError {
            return error
        } catch {
            Issue.record("unexpected error \(error)")
            return nil
        }
    }

    @Test(arguments: TransportKind.allCases)
    func snapshotRequestsCarryTheTokenAndARefusalKeepsDatabaseUpdateAndPartialDownload(_ kind: TransportKind)
        async throws
    {
        let temp = try TemporaryDirectory("ferry-token")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        let v1 = try fixtures.publish(rows: 5)
        try await withGatedFerryServer(store: fixtures.store.root, token: Self.token, forbiddenToken: "other-user") {
            url, gate, refresh in
            let box = TokenBox(Self.token)
            var configuration = FerryClient.Configuration(
                directory: temp.appending("client"), serverURL: url, dataset: fixtures.dataset)
            configuration.tokenProvider = { await box.token }
            let client = try await FerryClient.open(configuration: configuration.using(kind.shared), logger: .test)
            let dir = client.directory

            // Given version 1 live and version 2 pending, both fetched with the token
            #expect(try await client.checkForUpdates().outcome == .initialSync)
            #expect(await gate.log.requests.last?.authorization == "Bearer \(Self.token)")
            _ = try fixtures.publish(rows: 6)
            try await refresh()
            #expect(try await client.checkForUpdates().outcome == .updateDownloaded)

            // And half of version 3 downloaded before the connection broke
            let v3 = try fixtures.publish(rows: 7, blobMiB: 1)
            try await refresh()
            let v3Bytes = try Data(contentsOf: fixtures.snapshotFile(3))
            try v3Bytes.prefix(v3Bytes.count / 2).write(to: dir.partial)
            try JSONEncoder().encode(
                PartialRecord(dataset: fixtures.dataset, expected: .init(sha256: v3.sha256, size: v3.size, version: 3))
            ).write(to: dir.partialRecord)
            _ = try await client.status()
            let before = Self.fingerprint(dir)
            #expect(before.values.allSatisfy { $0 != nil })

            // When the server refuses the token (it expired), sends none, or does not grant the dataset
            for (token, status) in [("expired-token", 401), (nil, 401), ("other-user", 403)] as [(String?, Int)] {
                await box.set(token)
                let error = await Self.refusal { _ = try await client.checkForUpdates() }

                // Then the error is typed, says what to do, and names no token
                #expect(error?.code == .unauthorized)
                if status == 401 { #expect(error?.message == Self.refusedMessage) }
                #expect(error?.message.contains("(\(status))") == true)
                #expect(
                    !(error?.description.contains("expired-token") ?? true)
                        && !(error?.description.contains("other-user") ?? true))
                let seen = await gate.log.requests.last
                #expect(seen?.status == status)
                #expect(seen?.authorization == token.map { "Bearer \($0)" })
                // The refused request was the manifest's revalidation (nothing is downloaded before it answers), and
                // the partial download stays resumable
                #expect(seen?.path == "/v1/datasets/trips/manifest")
                // And database.db, updated.db, the partial download, its record and the state are all intact
                #expect(Self.fingerprint(dir) == before)
                let clientStatus = try await client.status()
                #expect(clientStatus.version == 1 && clientStatus.pendingVersion == 2)
            }

            // When the app has a valid token again, the download resumes where it was
            await box.set(Self.token)
            let resumed = try await client.checkForUpdates()
            #expect(resumed.outcome == .updateDownloaded && resumed.download?.version == 3)
            #expect(resumed.check.resumedFrom == Int64(v3Bytes.count / 2))
            // (a partial record from before version URLs names no representation: its bytes are the SQLite file's,
            // and it resumes as such)
            #expect(await gate.log.requests.last?.path == "/v1/datasets/trips/versions/3")
            #expect(await gate.log.requests.last?.range == "bytes=\(v3Bytes.count / 2)-")
            #expect(try publishedVersion(of: dir.updated, among: [v1, v3]) == 3)
            await client.close()
        }
    }

    @Test(arguments: TransportKind.allCases) func aTokenThatCannotBeAHeaderIsRefusedWithoutSendingOrShowingIt(
        _ kind: TransportKind
    ) async throws {
        let temp = try TemporaryDirectory("ferry-token")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        try fixtures.publish()
        try await withGatedFerryServer(store: fixtures.store.root, token: Self.token) { url, gate, _ in
            var configuration = FerryClient.Configuration(
                directory: temp.appending("client"), serverURL: url, dataset: fixtures.dataset)
            configuration.setAccessToken("line\r\nX-Injected: yes")
            let client = try await FerryClient.open(configuration: configuration.using(kind.shared), logger: .test)
            let error = await Self.refusal { _ = try await client.checkForUpdates() }
            #expect(error?.code == .badInput)
            #expect(!(error?.description.contains("Injected") ?? true))
            #expect(await gate.log.requests.isEmpty)
            await client.close()
        }
    }

    @Test func fetchCommandTakesTheTokenFromTheOptionOrFerryToken() async throws {
        let temp = try TemporaryDirectory("ferry-token")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        let v1 = try fixtures.publish(rows: 5)
        try await withGatedFerryServer(store: fixtures.store.root, token: Self.token) { url, gate, _ in
            let dir = ClientDirectory(temp.appending("client"))
            let fetch = [
                "fetch", "--server", url.absoluteString, "--dataset", fixtures.dataset, "--dir", dir.url.path,
                "--verbose",
            ]
            let noToken = ["FERRY_TOKEN": ""]

            // Without a token, and with a wrong one: exit 1, the fix named, nothing installed, no token shown
            for (arguments, environment) in [
                (fetch, noToken), (fetch + ["--token", "wrong-token-1"], noToken),
                (fetch, ["FERRY_TOKEN": "wrong-token-2"]),
            ] {
                let refused = try await runFerry(arguments + ["--json"], environment: environment)
                #expect(refused.status == 1)
                #expect(refused.stdout.isEmpty)
                #expect(refused.stderr.contains("the server refused the access token (401)"))
                #expect(refused.stderr.contains("--token") && refused.stderr.contains("FERRY_TOKEN"))
                #expect(!refused.stderr.contains("wrong-token"))
                #expect(!dir.exists(dir.database) && !dir.exists(dir.updated))
            }
            #expect(
                await gate.log.requests.map(\.authorization) == [nil, "Bearer wrong-token-1", "Bearer wrong-token-2"])

            // FERRY_TOKEN works, and --token wins over it
            let fromEnvironment = try await runFerry(
                fetch + ["--json"], environment: ["FERRY_TOKEN": Self.token])
            #expect(fromEnvironment.status == 0, "\(fromEnvironment.stderr)")
            #expect(fromEnvironment.stdout.contains(#""result":"initialSync""#))
            #expect(fromEnvironment.stdout.contains(#""sha256":"\#(v1.sha256)""#))
            let overridden = try await runFerry(
                fetch + ["--token", Self.token, "--json"], environment: ["FERRY_TOKEN": "wrong-token-3"])
            #expect(overridden.status == 0, "\(overridden.stderr)")
            #expect(overridden.stdout.contains(#""result":"notModified""#))
            #expect(await gate.log.requests.last?.authorization == "Bearer \(Self.token)")

            // The token never appears in what the CLI prints, even with --verbose
            for result in [fromEnvironment, overridden] {
                #expect(!result.stdout.contains(Self.token) && !result.stderr.contains(Self.token))
            }
            // Nor in a file it wrote
            for file in try FileManager.default.subpathsOfDirectory(atPath: dir.url.path) {
                let data = (try? Data(contentsOf: dir.url.appendingPathComponent(file))) ?? Data()
                #expect(data.range(of: Data(Self.token.utf8)) == nil, "\(file)")
            }

            // An empty --token is a usage error
            #expect(try await runFerry(fetch + ["--token", ""]).status == 2)
        }
    }
}

/// Pushing with a refused token: the edits stay queued with their change ids, nothing is retried, and the next push
/// with a valid token sends the same ids. Real PostgreSQL, publisher, merge engine and server, behind a ``TokenGate``.
@Suite struct AccessTokenPushTests {
    static let token = AccessTokenTests.token

    static func outboxIDs(_ client: FerryClient) async throws -> [String] {
        try await client.withDatabase { db in
            try db.query("SELECT id FROM ferry_outbox ORDER BY seq").compactMap { $0[0].text }
        }
    }

    @Test(arguments: TransportKind.allCases) func aRefusedPushKeepsTheEditsAndTheNextPushSendsTheSameChangeIDs(
        _ kind: TransportKind
    ) async throws {
        let database = try TestDatabase.create("token")
        let temp = try TemporaryDirectory("ferry-token-push")
        defer {
            database.drop()
            temp.remove()
        }
        let root = TestPaths.packageRoot
        try database.connect().execute(
            try String(contentsOf: root.appendingPathComponent("templates/trips.pg.sql"), encoding: .utf8))
        let templatePath = root.appendingPathComponent("templates/trips.yml").path
        let store = temp.appending("store")
        _ = try await Publisher(
            configuration: .init(templatePath: templatePath, databaseURL: database.url, store: store), logger: .test
        ).publish()
        let merger = try await ChangeMerger.start(
            template: try Template.load(path: templatePath), databaseURL: database.url, logger: .test)
        defer { merger.shutdown() }
        @Sendable func serverScalar(_ sql: String, _ parameters: [String?] = []) throws -> String? {
            try database.connect().query(sql, parameters).first?.first ?? nil
        }

        try await withGatedFerryServer(
            store: store, token: Self.token, extraRoutes: [ChangesRoute(mergers: ["trips": merger])]
        ) { url, gate, _ in
            let box = TokenBox(Self.token)
            var configuration = FerryClient.Configuration(
                directory: temp.appending("device"), serverURL: url, dataset: "trips")
            configuration.push.onOpen = false
            configuration.push.attempts = 3
            configuration.push.backoff = .milliseconds(10)
            configuration.tokenProvider = { await box.token }
            let device = try await FerryClient.open(configuration: configuration.using(kind.shared), logger: .test)
            #expect(try await device.checkForUpdates().outcome == .initialSync)

            // Given an offline edit
            _ = try await device.execute("UPDATE trips SET passengers = 5 WHERE name = 'Växjö-Kalmar'")
            let queued = try await Self.outboxIDs(device)
            #expect(queued.count == 1)

            // When the push is refused (the token expired)
            await box.set("expired-token")
            let error = await #expect(throws: FerryError.self) { try await device.push() }

            // Then it is .unauthorized, tried once (no retry with the same token), and nothing reached PostgreSQL
            #expect(error?.code == .unauthorized)
            #expect(error?.message == AccessTokenTests.refusedMessage)
            var uploads = await gate.log.changeUploads
            #expect(uploads.map(\.status) == [401])
            #expect(uploads.map(\.changeIDs) == [queued])
            #expect(try serverScalar("SELECT count(*) FROM ferry_changes") == "0")
            // And the edit is still queued, with its id, and still visible locally
            #expect(try await Self.outboxIDs(device) == queued)
            #expect(
                try await device.withDatabase {
                    try $0.scalar("SELECT passengers FROM trips WHERE name = 'Växjö-Kalmar'")?.integer
                } == 5)

            // When the app signs in again and pushes: the same change id is sent and applied once
            await box.set(Self.token)
            let pushed = try await device.push()
            #expect(pushed.summary.applied == 1 && pushed.remaining == 0)
            uploads = await gate.log.changeUploads
            #expect(uploads.map(\.status) == [401, 200])
            #expect(uploads.last?.changeIDs == queued)
            #expect(uploads.last?.authorization == "Bearer \(Self.token)")
            #expect(try serverScalar("SELECT count(*) FROM ferry_changes WHERE id = $1", [queued[0]]) == "1")
            #expect(try serverScalar("SELECT passengers FROM trips WHERE name = 'Växjö-Kalmar'") == "5")
            await device.close()

            // The same through the CLI: an edit, a refused `ferry push`, then FERRY_TOKEN
            let dir = temp.appending("device").path
            let common = ["--server", url.absoluteString, "--dataset", "trips", "--dir", dir]
            #expect(
                try await runFerry([
                    "exec", "--dir", dir, "UPDATE trips SET passengers = 6 WHERE name = 'Växjö-Kalmar'",
                ]).status == 0)
            let refused = try await runFerry(
                ["push"] + common + ["--token", "expired-token", "--json"], environment: ["FERRY_TOKEN": ""])
            #expect(refused.status == 1)
            #expect(refused.stdout.isEmpty)
            #expect(refused.stderr.contains("the server refused the access token (401)"))
            #expect(refused.stderr.contains("--token") && refused.stderr.contains("FERRY_TOKEN"))
            #expect(!refused.stderr.contains("expired-token"))
            let refusedIDs = await gate.log.changeUploads.last?.changeIDs ?? []
            #expect(refusedIDs.count == 1)
            #expect(await gate.log.changeUploads.count == 3)  // one attempt, not three
            #expect(try await runFerry(["status", "--dir", dir, "--json"]).stdout.contains(#""outbox":1"#))

            let accepted = try await runFerry(
                ["push"] + common + ["--json", "--verbose"], environment: ["FERRY_TOKEN": Self.token])
            #expect(accepted.status == 0, "\(accepted.stderr)")
            #expect(
                accepted.stdout
                    == #"{"sent":1,"applied":1,"rejected":0,"gone":0,"invalid":0,"forbidden":0,"unanswered":0,"remaining":0,"merged":0,"attachments":{"bytes":0,"pending":0,"uploaded":0}}"#
                    + "\n")
            #expect(await gate.log.changeUploads.last?.changeIDs == refusedIDs)
            #expect(try serverScalar("SELECT passengers FROM trips WHERE name = 'Växjö-Kalmar'") == "6")

            // `ferry sync` takes the token the same way; a refused one keeps everything
            let syncRefused = try await runFerry(
                ["sync"] + common + ["--json"], environment: ["FERRY_TOKEN": "expired-token"])
            #expect(syncRefused.status == 1)
            #expect(syncRefused.stderr.contains("FERRY_TOKEN") && !syncRefused.stderr.contains("expired-token"))
            let synced = try await runFerry(
                ["sync"] + common + ["--token", Self.token, "--json"], environment: ["FERRY_TOKEN": ""])
            #expect(synced.status == 0, "\(synced.stderr)")
            #expect(synced.stdout.contains(#""state":"upToDate""#))
            for result in [refused, accepted, syncRefused, synced] {
                #expect(!result.stdout.contains(Self.token) && !result.stderr.contains(Self.token))
            }
        }
    }
}
