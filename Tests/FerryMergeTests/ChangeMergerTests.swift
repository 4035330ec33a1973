import FerryCore
import FerryPostgres
import FerryTestSupport
import Foundation
import Logging
import Testing

@testable import FerryMerge

/// The merge engine against PostgreSQL: devices, clocks, retries, bad changes, type conversion.
@Suite struct ChangeMergerTests {
    static let base = "2026-11-21T09:00:00.000Z"

    /// Two devices edit the same row offline; A pushes, then B. B's edit was made before A's push reached the
    /// server, so newest-wins and server-wins keep A's row; client-wins takes B's.
    @Test(arguments: MergeRule.allCases)
    func twoDevicesEditTheSameRowOffline(rule: MergeRule) async throws {
        let f = try await MergeFixture.make(rule: rule, clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        try f.seed(created: Self.base, updated: Self.base)
        let a = try await f.push(
            [change(.update, values: ["seats": .int(1)], edited: "2026-11-21T09:30:00.000Z", base: Self.base)],
            sentAt: "2026-11-21T10:00:00.000Z", client: "device-a")
        #expect(a.map(\.status) == [.applied])
        f.clock.set("2026-11-21T10:05:00.000Z")
        let b = try await f.push(
            [
                change(
                    .update, values: ["seats": .int(2), "stops": .int(7)], edited: "2026-11-21T09:45:00.000Z",
                    base: Self.base)
            ],
            sentAt: "2026-11-21T10:05:00.000Z", client: "device-b")
        switch rule {
        case .newestWins, .serverWins:
            #expect(b.map(\.status) == [.rejected])
            #expect(b[0].row == tripRow(seats: 1, created: Self.base, updated: "2026-11-21T10:00:00.000Z"))
            #expect(try f.trip()?[1...2] == ["1", "0"])
        case .clientWins:
            #expect(b.map(\.status) == [.applied])
            #expect(try f.trip()?[1...2] == ["2", "7"])
        }
        // B's next edit, based on the row it got back, is no conflict.
        f.clock.set("2026-11-21T10:10:00.000Z")
        let next = try await f.push(
            [
                change(
                    .update, values: ["stops": .int(3)], edited: "2026-11-21T10:09:00.000Z",
                    base: text(b[0].row?["updated_at"]))
            ],
            sentAt: "2026-11-21T10:10:00.000Z", client: "device-b")
        #expect(next.map(\.status) == [.applied])
    }

    /// Both devices push at the same moment: row locks serialise them, so exactly one applies and the other
    /// sees its result (newest-wins: the later push conflicts with the first and its edit is older).
    @Test("a change id another device already used is refused, and that device's answer is not revealed")
    func changeIDOfAnotherDevice() async throws {
        let f = try await MergeFixture.make(clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        try f.seed(id: 1, created: Self.base, updated: Self.base)
        try f.seed(id: 2, created: Self.base, updated: Self.base)
        let a = try await f.push(
            [
                change(
                    .update, id: 1, values: ["seats": .int(4)], edited: "2026-11-21T09:30:00.000Z", base: Self.base,
                    changeID: "shared-id")
            ],
            sentAt: "2026-11-21T10:00:00.000Z", client: "device-a")
        #expect(a.map(\.status) == [.applied] && a[0].row != nil)
        // When device B sends a change with the same id (in a batch, and alone in the slow path after a refusal)
        for batch in [
            [
                change(
                    .update, id: 2, values: ["seats": .int(9)], edited: "2026-11-21T09:40:00.000Z", base: Self.base,
                    changeID: "shared-id")
            ],
            [
                change(
                    .update, id: 2, values: ["seats": .int(9)], edited: "2026-11-21T09:40:00.000Z", base: Self.base,
                    changeID: "shared-id"),
                change(
                    .update, id: 2, values: ["seats": .string("not a number")], edited: "2026-11-21T09:41:00.000Z",
                    base: Self.base),
            ],
        ] {
            let b = try await f.push(batch, sentAt: "2026-11-21T10:01:00.000Z", client: "device-b")
            // Then it is invalid, carries no row of A's, and nothing was written
            #expect(b[0].status == .invalid && b[0].row == nil && b[0].message?.contains("already used") == true)
            #expect(try f.trip(2)?[1] == "0")
        }
        // And device A still gets its own answer for its id
        let again = try await f.push(
            [
                change(
                    .update, id: 1, values: ["seats": .int(4)], edited: "2026-11-21T09:30:00.000Z", base: Self.base,
                    changeID: "shared-id")
            ],
            sentAt: "2026-11-21T10:02:00.000Z", client: "device-a")
        #expect(again == a)
    }

    @Test func concurrentPushesOfTheSameRowAreSerialised() async throws {
        let f = try await MergeFixture.make(rule: .serverWins, connections: 4, clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        for round in 0..<20 {
            _ = try f.pg.query("DELETE FROM trips")
            try f.seed(created: Self.base, updated: Self.base)
            let merger = f.merger
            let results = try await withThrowingTaskGroup(of: ChangeResult.self) { group in
                for device in 0..<4 {
                    group.addTask {
                        try await merger.apply(
                            ChangeBatch(
                                clientId: "device-\(device)", sentAt: "2026-11-21T10:00:00.000Z",
                                changes: [
                                    change(
                                        .update, values: ["seats": .int(Int64(device + 1))],
                                        edited: "2026-11-21T09:59:00.000Z", base: Self.base)
                                ])
                        ).results[0]
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let applied = results.filter { $0.status == .applied }
            #expect(applied.count == 1, "round \(round): \(results.map(\.status))")
            #expect(results.filter { $0.status == .rejected }.count == 3)
            // Every rejection returns the winner's row.
            for r in results where r.status == .rejected { #expect(r.row == applied.first?.row) }
            #expect(try f.trip()?[1] == text(applied.first?.row?["seats"]))
        }
    }

    /// A device whose clock is a year ahead neither wins nor loses because of it: its editedAt is shifted by the
    /// batch's offset (server now − sentAt) before it is compared.
    @Test func deviceClockAYearAheadNeitherWinsNorLoses() async throws {
        let f = try await MergeFixture.make(rule: .newestWins, clock: "2026-11-21T10:00:10.000Z")
        defer { f.close() }
        let year = 365 * 86_400.0
        func deviceTime(_ iso: String) -> String { Timestamp.format(Timestamp.parse(iso)!.addingTimeInterval(year)) }
        // The server row changed at 10:00:05 (real time).
        try f.seed(id: 1, created: Self.base, updated: "2026-11-21T10:00:05.000Z")
        try f.seed(id: 2, created: Self.base, updated: "2026-11-21T10:00:05.000Z")
        // Really edited at 10:00:00 (before the server change) and 10:00:08 (after), sent at 10:00:10,
        // all read off a clock one year ahead.
        let results = try await f.push(
            [
                change(
                    .update, id: 1, values: ["seats": .int(1)], edited: deviceTime("2026-11-21T10:00:00.000Z"),
                    base: Self.base),
                change(
                    .update, id: 2, values: ["seats": .int(2)], edited: deviceTime("2026-11-21T10:00:08.000Z"),
                    base: Self.base),
            ],
            sentAt: deviceTime("2026-11-21T10:00:10.000Z"))
        #expect(results.map(\.status) == [.rejected, .applied])
        // A year behind, the same.
        f.clock.set("2026-11-21T10:00:20.000Z")
        try f.seed(id: 3, created: Self.base, updated: "2026-11-21T10:00:15.000Z")
        func behind(_ iso: String) -> String { Timestamp.format(Timestamp.parse(iso)!.addingTimeInterval(-year)) }
        let late = try await f.push(
            [
                change(
                    .update, id: 3, values: ["seats": .int(3)], edited: behind("2026-11-21T10:00:18.000Z"),
                    base: Self.base)
            ],
            sentAt: behind("2026-11-21T10:00:20.000Z"))
        #expect(late.map(\.status) == [.applied])
    }

    /// The same batch sent twice (a retry after a lost acknowledgement) has one effect and the same answers.
    @Test func sameBatchTwiceHasOneEffect() async throws {
        let f = try await MergeFixture.make(rule: .clientWins, clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        try f.seed(id: 2, created: Self.base, updated: Self.base)
        let batch = [
            change(
                .insert, id: 1, values: ["name": .string("Växjö-Kalmar"), "seats": .int(0), "stops": .int(0)],
                edited: "2026-11-21T09:59:00.000Z"),
            change(.update, id: 2, values: ["seats": .int(5)], edited: "2026-11-21T09:59:30.000Z", base: Self.base),
            change(.delete, id: 2, edited: "2026-11-21T09:59:40.000Z", base: "2026-11-21T10:00:00.000Z"),
        ]
        let first = try await f.push(batch, sentAt: "2026-11-21T10:00:00.000Z")
        #expect(first.map(\.status) == [.applied, .applied, .applied])
        f.clock.set("2026-11-21T10:07:00.000Z")
        let second = try await f.push(batch, sentAt: "2026-11-21T10:07:00.000Z")
        #expect(second == first)
        #expect(try f.trip(1)?[4] == "2026-11-21T10:00:00.000000Z")
        #expect(try f.trip(2) == nil)
        #expect(try f.count("SELECT count(*) FROM ferry_changes") == 3)
        #expect(try f.count("SELECT count(*) FROM ferry_tombstones") == 1)
        #expect(
            try f.count("SELECT count(*) FROM ferry_changes WHERE client_id = 'device-1' AND dataset = 'trips'") == 3)
    }

    /// A change id repeated inside one batch is applied once; the repeat gets the first answer.
    @Test func duplicateIDInsideOneBatchAppliesOnce() async throws {
        let f = try await MergeFixture.make(rule: .clientWins, clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        try f.seed(created: Self.base, updated: Self.base)
        let one = change(
            .update, values: ["seats": .int(1)], edited: "2026-11-21T09:59:00.000Z", base: Self.base, changeID: "c-1")
        var other = one
        other.values = ["seats": .int(99)]  // same id, different content: still the first answer
        let results = try await f.push([one, other], sentAt: "2026-11-21T10:00:00.000Z")
        #expect(results.count == 2)
        #expect(results[0] == results[1])
        #expect(try f.trip()?[1] == "1")
    }

    /// Two changes of the same row in one batch: the second sees the first (its base is the first's stamp).
    @Test func secondChangeOfARowInOneBatchSeesTheFirst() async throws {
        let f = try await MergeFixture.make(rule: .serverWins, clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        let results = try await f.push(
            [
                change(
                    .insert, values: ["name": .string("Växjö-Kalmar"), "seats": .int(0), "stops": .int(0)],
                    edited: "2026-11-21T09:58:00.000Z"),
                change(
                    .update, values: ["seats": .int(2)], edited: "2026-11-21T09:59:00.000Z",
                    base: "2026-11-21T10:00:00.000Z"),
                change(
                    .update, values: ["seats": .int(3)], edited: "2026-11-21T09:59:30.000Z",
                    base: "2026-11-21T09:00:00.000Z"),
            ], sentAt: "2026-11-21T10:00:00.000Z")
        #expect(results.map(\.status) == [.applied, .applied, .rejected])
        #expect(try f.trip()?[1] == "2")
    }

    /// Bad changes are answered `invalid` with a message naming what is wrong; the good ones beside them apply.
    @Test func invalidChangesNextToValidOnes() async throws {
        let f = try await MergeFixture.make(rule: .newestWins, clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        try f.seed(created: Self.base, updated: Self.base)
        let edited = "2026-11-21T09:59:00.000Z"
        var missingKey = change(.update, values: ["seats": .int(1)], edited: edited, base: Self.base)
        missingKey.key = [:]
        var extraKey = change(.update, values: ["seats": .int(1)], edited: edited, base: Self.base)
        extraKey.key["name"] = .string("x")
        var badEdited = change(.update, values: ["seats": .int(1)], edited: edited, base: Self.base)
        badEdited.editedAt = "yesterday"
        let batch: [Change] = [
            change(.update, values: ["seats": .int(4)], edited: edited, base: Self.base),  // valid
            change(.update, values: ["seats": .int(1)], edited: edited, base: Self.base, table: "nope"),
            change(.update, values: ["colour": .string("red")], edited: edited, base: Self.base),
            change(.update, values: ["name": .string("x")], edited: edited, base: Self.base, table: "routes"),
            change(.update, values: ["seats": .string("many")], edited: edited, base: Self.base),
            missingKey, extraKey, badEdited,
            change(.delete, values: ["seats": .int(1)], edited: edited, base: Self.base),
            change(.update, values: [:], edited: edited, base: Self.base),
            change(.update, values: ["id": .int(5)], edited: edited, base: Self.base),
            // Passes every check here, but PostgreSQL refuses it (NOT NULL): the batch falls back to a
            // transaction per change and only this one fails.
            change(.insert, id: 7, values: ["name": .null, "seats": .int(0), "stops": .int(0)], edited: edited),
            change(
                .insert, id: 8, values: ["name": .string("Kalmar-Växjö"), "seats": .int(2), "stops": .int(1)],
                edited: edited),  // valid
        ]
        let results = try await f.push(batch, sentAt: "2026-11-21T10:00:00.000Z")
        #expect(results.map(\.id) == batch.map(\.id))
        #expect(results.map(\.status) == [.applied] + Array(repeating: .invalid, count: 11) + [.applied])
        let messages = results.map { $0.message ?? "" }
        #expect(messages[1].contains("unknown table 'nope'"))
        #expect(messages[2].contains("unknown column 'colour'"))
        #expect(messages[3].contains("read-only"))
        #expect(messages[4].contains("trips.seats") && messages[4].contains("integer"))
        #expect(messages[5].contains("lacks primary-key column 'id'"))
        #expect(messages[6].contains("'name' is not part of the primary key"))
        #expect(messages[7].contains("editedAt"))
        #expect(messages[8].contains("must not carry values"))
        #expect(messages[9].contains("no values"))
        #expect(messages[10].contains("cannot change"))
        #expect(messages[11].contains("null value") && messages[11].contains("name"))
        #expect(try f.trip()?[1] == "4")
        #expect(try f.trip(8)?[0] == "Kalmar-Växjö")
        #expect(try f.trip(7) == nil)
        // Every answer is stored: resending gets the same answers.
        #expect(try f.count("SELECT count(*) FROM ferry_changes") == batch.count)
        #expect(try await f.push(batch, sentAt: "2026-11-21T10:00:00.000Z") == results)
    }

    /// Request identifiers are only looked up, never spliced: a hostile name is just an unknown column/table.
    @Test func hostileNamesAreOnlyLookedUp() async throws {
        let f = try await MergeFixture.make(clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        try f.seed(created: Self.base, updated: Self.base)
        let results = try await f.push(
            [
                change(
                    .update, values: ["seats\" = 0; DROP TABLE trips; --": .int(1)], edited: Self.base, base: Self.base),
                change(
                    .update, values: ["seats": .int(1)], edited: Self.base, base: Self.base,
                    table: "trips; DROP TABLE trips"),
                change(
                    .update, values: ["name": .string("'); DROP TABLE trips; --")], edited: "2026-11-21T09:59:00.000Z",
                    base: Self.base),
            ], sentAt: "2026-11-21T10:00:00.000Z")
        #expect(results.map(\.status) == [.invalid, .invalid, .applied])
        #expect(try f.trip()?[0] == "'); DROP TABLE trips; --")
    }

    /// Every type of the publisher's mapping goes in as the snapshot's JSON form and comes back the same way.
    @Test func typeConversions() async throws {
        let ddl = """
            CREATE TYPE mood AS ENUM ('calm', 'busy');
            CREATE TABLE kinds(
              id uuid PRIMARY KEY, i int8, s int2, b bool, r float8, n numeric(10,2), t varchar(20), m mood,
              ts timestamptz, tl timestamp, d date, j jsonb, bin bytea, arr int[],
              created_at timestamptz, updated_at timestamptz);
            """
        let f = try await MergeFixture.make(
            ddl: ddl, tables: [MergeTable(name: "kinds", source: "kinds", writable: true, merge: .newestWins)],
            clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        let id = "0E5B1D92-6A7B-4C1E-9F00-8A1B2C3D4E5F"
        let values: [String: JSONValue] = [
            "i": .int(9_007_199_254_740_993), "s": .double(7), "b": .int(1), "r": .double(1.5), "n": .string("12.5"),
            "t": .string("Växjö"),
            "m": .string("busy"), "ts": .string("2018-04-29T13:21:02.123+02:00"),
            "tl": .string("2018-04-29T11:21:02.456Z"),
            "d": .string("2018-04-29"), "j": .string("{\"a\":[1,2]}"), "bin": .string("AQID"),
            "arr": .string("[1,2,3]"),
        ]
        let results = try await f.push(
            [
                Change(
                    id: "k1", table: "kinds", op: .insert, key: ["id": .string(id)], values: values,
                    editedAt: Self.base, baseUpdatedAt: nil)
            ],
            sentAt: "2026-11-21T10:00:00.000Z")
        #expect(results.map(\.status) == [.applied], "\(results)")
        let row = try #require(results.first?.row)
        #expect(row["id"] == .string(id.lowercased()))
        #expect(row["i"] == .int(9_007_199_254_740_993))
        #expect(row["s"] == .int(7))
        #expect(row["b"] == .int(1))
        #expect(row["r"] == .double(1.5))
        #expect(row["n"] == .string("12.50"))
        #expect(row["t"] == .string("Växjö"))
        #expect(row["m"] == .string("busy"))
        #expect(row["ts"] == .string("2018-04-29T11:21:02.123Z"))
        #expect(row["tl"] == .string("2018-04-29T11:21:02.456Z"))
        #expect(row["d"] == .string("2018-04-29"))
        #expect(row["j"] == .string("{\"a\": [1, 2]}"))
        #expect(row["bin"] == .string("AQID"))
        #expect(row["arr"] == .string("[1,2,3]"))
        #expect(row["created_at"] == .string("2026-11-21T10:00:00.000Z"))
        #expect(
            try f.pg.query("SELECT encode(bin, 'hex'), b::text, arr[2]::text FROM kinds") == [["010203", "true", "2"]])

        // Values that do not convert are invalid, naming the column; an upper-case key finds the lower-case row.
        let bad: [(String, JSONValue)] = [
            ("i", .string("x")), ("s", .double(1.5)), ("b", .int(2)), ("r", .string("1.5")), ("n", .string("lots")),
            ("t", .bool(true)),
            ("ts", .string("29/04/2018")), ("d", .string("2018-4-29")), ("j", .string("{nope")),
            ("bin", .string("***")), ("arr", .string("1,2")),
        ]
        let changes = bad.enumerated().map { i, pair in
            Change(
                id: "bad\(i)", table: "kinds", op: .update, key: ["id": .string(id)], values: [pair.0: pair.1],
                editedAt: Self.base,
                baseUpdatedAt: "2026-11-21T10:00:00.000Z")
        }
        let answers = try await f.push(changes, sentAt: "2026-11-21T10:00:00.000Z")
        for (answer, pair) in zip(answers, bad) {
            #expect(answer.status == .invalid)
            #expect(answer.message?.contains("kinds.\(pair.0)") == true, "\(answer.message ?? "")")
        }
        // An enum value PostgreSQL refuses is caught by the per-change fallback.
        let enumAnswer = try await f.push(
            [
                Change(
                    id: "bad-enum", table: "kinds", op: .update, key: ["id": .string(id)],
                    values: ["m": .string("angry")], editedAt: Self.base,
                    baseUpdatedAt: "2026-11-21T10:00:00.000Z")
            ], sentAt: "2026-11-21T10:00:00.000Z")
        #expect(enumAnswer.map(\.status) == [.invalid])
        #expect(enumAnswer[0].message?.contains("mood") == true)
        // The row was never touched by any of them.
        #expect(try f.pg.query("SELECT i::text FROM kinds") == [["9007199254740993"]])
    }

    /// Tombstones go when pruned with a cutoff after their deletion time, and not before.
    @Test func pruneTombstonesByCutoff() async throws {
        let f = try await MergeFixture.make(rule: .clientWins, clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        try f.seed(id: 1, created: Self.base, updated: Self.base)
        try f.seed(id: 2, created: Self.base, updated: Self.base)
        _ = try await f.push(
            [change(.delete, id: 1, edited: Self.base, base: Self.base)], sentAt: "2026-11-21T10:00:00.000Z")
        f.clock.set("2026-11-22T10:00:00.000Z")
        _ = try await f.push(
            [change(.delete, id: 2, edited: Self.base, base: Self.base)], sentAt: "2026-11-22T10:00:00.000Z")
        #expect(try await f.merger.pruneTombstones(before: Timestamp.parse("2026-11-21T10:00:00.000Z")!) == 0)
        #expect(try await f.merger.pruneTombstones(before: Timestamp.parse("2026-11-22T00:00:00.000Z")!) == 1)
        #expect(try f.pg.query("SELECT key::text FROM ferry_tombstones") == [["{\"id\": 2}"]])
        #expect(try await f.merger.pruneProcessedChanges(before: Timestamp.parse("2026-11-23T00:00:00.000Z")!) == 2)
    }

    /// Start-up checks the template's names against the catalog and says what to fix.
    @Test func startupRejectsNamesPostgresDoesNotHave() async throws {
        let database = try TestDatabase.create("mergestart")
        defer { database.drop() }
        try database.connect().execute(MergeFixture.tripsDDL)
        let cases: [(MergeTable, String)] = [
            (MergeTable(name: "trips", source: "nowhere", writable: true), "does not exist"),
            (MergeTable(name: "trips", source: "trips", columns: ["id", "ghost"], writable: true), "'ghost'"),
            (MergeTable(name: "trips", source: "trips", writable: true, updatedColumn: "changed_at"), "changed_at"),
            (MergeTable(name: "trips", source: "trips", writable: true, updatedColumn: "name"), "must be a timestamp"),
        ]
        for (table, expected) in cases {
            do {
                _ = try await ChangeMerger.start(
                    dataset: "trips", tables: [table], configuration: .init(databaseURL: database.url),
                    logger: .init(label: "t"))
                Issue.record("start-up accepted \(table)")
            } catch let error as FerryError {
                #expect(error.code == .badTemplate)
                #expect(error.description.contains(expected), "\(error)")
            }
        }
        #expect(throws: FerryError.self) { try MergeRule(parsing: "last-wins") }
        #expect(try MergeRule(parsing: "server-wins") == .serverWins)
    }
}
