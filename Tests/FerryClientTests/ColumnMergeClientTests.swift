import FerryClientNIO
import FerryCore
import FerryPostgres
import FerryPublisher
import FerryServer
import FerryStore
import Foundation
import Logging
import Testing

@testable import FerryClient

/// Per-column merging, additive columns and the app's resolution (issue 40), end to end: real PostgreSQL, the real
/// publisher, the real server with its changes endpoint, and real client directories. The dataset is one inspection
/// finding with `merge: {rule: newest-wins, per: column, add: [on_hand]}`.
@Suite(.serialized) struct ColumnMergeClientTests {
    static let finding = "5d1f6c1e-2d7b-4c55-9a7e-0c5d7e1b0001"

    static let template = """
        dataset: findings
        schemaVersion: 1
        timestamps: { created: createdAt, updated: updatedAt }
        tables:
          - name: findings
            source: findings
            writable: true
            merge: {rule: newest-wins, per: column, add: [on_hand]}
        """

    static let ddl = """
        CREATE TABLE findings (
          id text PRIMARY KEY, severity text NOT NULL, note text, on_hand integer NOT NULL DEFAULT 0,
          "createdAt" timestamptz NOT NULL DEFAULT now(), "updatedAt" timestamptz NOT NULL DEFAULT now());
        INSERT INTO findings VALUES ('\(finding)', 'low', NULL, 1000, '2026-01-01', '2026-01-01');
        """

    struct World: Sendable {
        let database: TestDatabase
        let directory: TemporaryDirectory
        let templatePath: String
        let server: URL
        let wait: @Sendable (Int) async throws -> Void

        func publish() async throws {
            let result = try await Publisher(
                configuration: .init(
                    templatePath: templatePath, databaseURL: database.url, store: directory.appending("store")),
                logger: .test
            ).publish()
            try await wait(result.version)
        }

        func sql(_ text: String) throws { try database.connect().execute(text) }

        /// The server's finding: severity, note, on_hand.
        func serverRow() throws -> [String?] {
            try database.connect().query(
                "SELECT severity, note, on_hand::text FROM findings WHERE id = $1", [ColumnMergeClientTests.finding]
            ).first ?? []
        }

        /// A device that has synced the first version.
        func device(_ name: String) async throws -> FerryClient {
            var configuration = FerryClient.Configuration(
                directory: directory.appending(name), serverURL: server, dataset: "findings")
            configuration.push.onOpen = false
            configuration.push.backoff = .milliseconds(10)
            let client = try await FerryClient.open(
                configuration: configuration.using(AsyncHTTPClientTransport()), logger: .test)
            if try await client.status().version == nil { _ = try await client.checkForUpdates() }
            return client
        }
    }

    func withWorld(_ body: @Sendable @escaping (World) async throws -> Void) async throws {
        let database = try TestDatabase.create("columns")
        let directory = try TemporaryDirectory("column-merge")
        defer {
            database.drop()
            directory.remove()
        }
        try database.connect().execute(Self.ddl)
        let template = directory.appending("findings.yml")
        try Self.template.write(to: template, atomically: true, encoding: .utf8)
        let store = directory.appending("store")
        _ = try await Publisher(
            configuration: .init(templatePath: template.path, databaseURL: database.url, store: store), logger: .test
        ).publish()
        try await withFerryServer(
            store: store, dataset: "findings", database: .init(templatePaths: [template], databaseURL: database.url)
        ) { url, wait in
            try await withoutActuallyEscaping(wait) { wait in
                try await body(
                    World(
                        database: database, directory: directory, templatePath: template.path, server: url, wait: wait))
            }
        }
    }

    /// The device's finding: severity, note, on_hand.
    static func localRow(_ client: FerryClient) async throws -> [SQLiteValue] {
        try await client.withDatabase { db in
            try db.query("SELECT severity, note, on_hand FROM findings WHERE id = ?", [.text(finding)]).first ?? []
        }
    }

    @Test(
        "two devices edit different columns offline and push, in both orders: the server and a third device hold both",
        arguments: [false, true])
    func differentColumns(reversed: Bool) async throws {
        try await withWorld { world in
            let a = try await world.device("a")
            let b = try await world.device("b")
            _ = try await a.execute("UPDATE findings SET severity = 'high' WHERE id = '\(Self.finding)'")
            _ = try await b.execute("UPDATE findings SET note = 'rust on the hinge' WHERE id = '\(Self.finding)'")
            for device in reversed ? [b, a] : [a, b] {
                let pushed = try await device.push()
                #expect(pushed.summary.applied == 1 && pushed.summary.merged == 0 && pushed.summary.rejected == 0)
            }
            #expect(try world.serverRow() == ["high", "rust on the hinge", "1000"])
            #expect(try await a.rejectedEdits().isEmpty)
            #expect(try await b.rejectedEdits().isEmpty)
            try await world.publish()
            let c = try await world.device("c")
            #expect(try await Self.localRow(c) == [.text("high"), .text("rust on the hinge"), .integer(1000)])
            for device in [a, b, c] { await device.close() }
        }
    }

    @Test(
        "the same column: newest-wins keeps the later office write; the device's edit is merged with the server's row")
    func sameColumn() async throws {
        try await withWorld { world in
            let device = try await world.device("device")
            _ = try await device.execute(
                "UPDATE findings SET severity = 'mid', note = 'checked' WHERE id = '\(Self.finding)'")
            // The office's write is a day ahead: later than the device's edit however long the push takes.
            try world.sql(
                #"UPDATE findings SET severity = 'critical', "updatedAt" = now() + interval '1 day' WHERE id = '\#(Self.finding)'"#
            )
            let pushed = try await device.push()
            #expect(pushed.summary.merged == 1 && pushed.summary.applied == 0)
            #expect(try world.serverRow() == ["critical", "checked", "1000"])
            #expect(try await Self.localRow(device) == [.text("critical"), .text("checked"), .integer(1000)])
            let kept = try #require(try await device.rejectedEdits().first)
            #expect(kept.outcome == .merged && kept.lostColumns == ["severity"])
            #expect(kept.values["severity"] == .string("mid"))
            #expect(kept.serverValues?["severity"] == .string("critical"))
            #expect(kept.serverValues?["note"] == .string("checked"))
            await device.close()
        }
    }

    @Test("additive: 20 devices take from one counter at once, with resends: the sum is exact on every device")
    func additiveCounter() async throws {
        try await withWorld { world in
            var devices: [FerryClient] = []
            for i in 0..<20 { devices.append(try await world.device("d\(i)")) }
            for (i, device) in devices.enumerated() {
                _ = try await device.execute(
                    "UPDATE findings SET on_hand = on_hand - \(i + 1) WHERE id = '\(Self.finding)'")
            }
            // Every even device's batch is taken (marked sent) and uploaded by hand first, twice at once, as if
            // an earlier push had sent it and lost the answer; its push then sends the same change ids again.
            var resent: [ChangeBatch] = []
            for device in devices.enumerated().filter({ $0.offset % 2 == 0 }).map(\.element) {
                let changes = try await device.withDatabase { try Outbox.takeBatch(from: $0, limit: 10) }
                #expect(changes.count == 1 && changes[0].base?["on_hand"] == .int(1000))
                resent.append(
                    ChangeBatch(
                        clientId: try await device.deviceID(), sentAt: Timestamp.format(Date()), changes: changes))
            }
            let uploader = ChangeUploader(server: world.server, transport: AsyncHTTPClientTransport())
            try await withThrowingTaskGroup(of: Void.self) { group in
                for batch in resent + resent {
                    group.addTask { _ = try await uploader.upload(batch, dataset: "findings") }
                }
                for device in devices {
                    group.addTask {
                        let pushed = try await device.push()
                        #expect(pushed.summary.applied == 1 && pushed.remaining == 0)
                    }
                }
                try await group.waitForAll()
            }
            let taken = (1...20).reduce(0, +)
            #expect(try world.serverRow()[2] == String(1000 - taken))
            try await world.publish()
            var held: [SQLiteValue] = []
            for device in devices {
                _ = try await device.checkForUpdates()
                _ = try await device.applyPendingUpdate()
                held.append(try await Self.localRow(device)[2])
                await device.close()
            }
            #expect(held == Array(repeating: .integer(Int64(1000 - taken)), count: 20))
        }
    }

    /// A device whose edit of severity lost to a later office write (which also set on_hand to 900): merged.
    static func merged(_ world: World, _ name: String) async throws -> (FerryClient, RejectedEdit) {
        let device = try await world.device(name)
        _ = try await device.execute("UPDATE findings SET severity = 'mid' WHERE id = '\(finding)'")
        try world.sql(
            #"UPDATE findings SET severity = 'critical', on_hand = 900, "updatedAt" = now() + interval '1 day' WHERE id = '\#(finding)'"#
        )
        #expect(try await device.push().summary.merged == 1)
        let kept = try #require(try await device.rejectedEdits().first)
        #expect(kept.serverValues?["on_hand"] == .int(900))
        return (device, kept)
    }

    @Test("a resubmit lands on top of the server's row, once, even when the push is killed with -9 after the upload")
    func resubmitOnceAfterKill() async throws {
        try await withWorld { world in
            let (device, kept) = try await Self.merged(world, "device")
            let dir = device.directory.url.path
            await device.close()
            // The CLI lists the kept edit, then resubmits it: severity again, and 10 taken from the server's 900.
            let list = try await runFerry(["rejected", "list", "--dir", dir, "--json"])
            #expect(list.status == 0)
            #expect(
                list.stdout.contains(#""id":"\#(kept.id)""#) && list.stdout.contains(#""lostColumns":["severity"]"#))
            let resubmit = try await runFerry([
                "rejected", "resubmit", kept.id, "--set", "severity=mid", "--set", "on_hand=890", "--dir", dir,
                "--json",
            ])
            #expect(resubmit.status == 0, "\(resubmit.stderr)")
            // `ferry push`, killed with -9 once the server has applied the edit (or after it ended by itself).
            let database = world.database
            _ = try await offCooperativePool {
                try ClientProcessTests.runAndKillBlocking(
                    ["push", "--dir", dir, "--server", world.server.absoluteString, "--dataset", "findings"], after: 0,
                    until: {
                        // A failed read means "not yet": the loop asks again.
                        (try? database.connect().query("SELECT on_hand FROM findings", []).first?.first) == "890"
                    })
            }
            let reopened = try await world.device("device")
            _ = try await reopened.push()
            #expect(try world.serverRow() == ["mid", nil, "890"])
            #expect(try await Self.localRow(reopened) == [.text("mid"), .null, .integer(890)])
            #expect(try await reopened.rejectedEdits().isEmpty)
            #expect(try await reopened.pendingEdits() == 0)
            let changes = try world.database.connect().query(
                "SELECT count(*)::text FROM ferry_changes WHERE result::jsonb->>'status' = 'applied'", [])
            #expect(changes.first?.first == "1")
            await reopened.close()
        }
    }

    @Test("a discard keeps the server's row; an unknown id is an error that names it")
    func discard() async throws {
        try await withWorld { world in
            let (device, kept) = try await Self.merged(world, "device")
            try await device.discard(kept)
            #expect(try await device.rejectedEdits().isEmpty)
            #expect(try await device.pendingEdits() == 0)
            #expect(try await Self.localRow(device) == [.text("critical"), .null, .integer(900)])
            #expect(try world.serverRow() == ["critical", nil, "900"])
            await #expect(throws: FerryError.self) { try await device.discard(kept) }
            let dir = device.directory.url.path
            await device.close()
            let unknown = try await runFerry(["rejected", "discard", "no-such-edit", "--dir", dir])
            #expect(unknown.status == 1 && unknown.stderr.contains("no-such-edit"))
        }
    }
}
