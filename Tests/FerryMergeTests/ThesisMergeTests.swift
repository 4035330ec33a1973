import FerryCore
import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryMerge

/// The thesis' result tables (4.3.1–4.3.4) as executable tests, under each merge rule, against PostgreSQL.
@Suite struct ThesisMergeTests {
    static let created = "2018-04-29T11:21:02.000Z"

    /// Table 4.3.1: saving (Växjö-Kalmar, 0, 0) at 11:21:01 on the device; the server stamps its own time.
    @Test(arguments: MergeRule.allCases)
    func table431SaveStampsServerTime(rule: MergeRule) async throws {
        let f = try await MergeFixture.make(rule: rule, clock: "2018-04-29T11:21:02.000Z")
        defer { f.close() }
        let results = try await f.push(
            [
                change(
                    .insert, values: ["name": .string("Växjö-Kalmar"), "seats": .int(0), "stops": .int(0)],
                    edited: "2018-04-29T11:21:01.000Z")
            ],
            sentAt: "2018-04-29T11:21:01.000Z")
        #expect(results.map(\.status) == [.applied])
        #expect(results[0].row == tripRow(seats: 0, created: Self.created, updated: Self.created))
        #expect(
            try f.trip() == ["Växjö-Kalmar", "0", "0", "2018-04-29T11:21:02.000000Z", "2018-04-29T11:21:02.000000Z"])
    }

    /// Table 4.3.2: an edit at 11:30:00 of a row unchanged since the device saw it (11:21:02). No conflict, so it
    /// applies under every rule (the thesis' server-wins also discarded it; issue 5 applies it, see
    /// docs/merge-rules.md), stamped with the server's 11:30:01.
    @Test(arguments: MergeRule.allCases)
    func table432EditWithoutConflictApplies(rule: MergeRule) async throws {
        let f = try await MergeFixture.make(rule: rule, clock: "2018-04-29T11:30:01.000Z")
        defer { f.close() }
        try f.seed(created: Self.created, updated: Self.created)
        let results = try await f.push(
            [change(.update, values: ["seats": .int(1)], edited: "2018-04-29T11:30:00.000Z", base: Self.created)],
            sentAt: "2018-04-29T11:30:00.000Z")
        #expect(results.map(\.status) == [.applied])
        #expect(results[0].row == tripRow(seats: 1, created: Self.created, updated: "2018-04-29T11:30:01.000Z"))
        #expect(try f.trip()?[1] == "1")
    }

    /// Table 4.3.3: the server row changed at 11:45:05, after the device's base; the device's edit (11:30:00) is
    /// older. Newest-wins and server-wins keep the server row; client-wins overwrites it at server time 11:30:01.
    @Test(arguments: MergeRule.allCases)
    func table433OlderEditAgainstNewerServerRow(rule: MergeRule) async throws {
        let f = try await MergeFixture.make(rule: rule, clock: "2018-04-29T11:30:01.000Z")
        defer { f.close() }
        try f.seed(created: Self.created, updated: "2018-04-29T11:45:05.000Z")
        let results = try await f.push(
            [change(.update, values: ["seats": .int(1)], edited: "2018-04-29T11:30:00.000Z", base: Self.created)],
            sentAt: "2018-04-29T11:30:00.000Z")
        switch rule {
        case .newestWins, .serverWins:
            #expect(results.map(\.status) == [.rejected])
            #expect(results[0].row == tripRow(seats: 0, created: Self.created, updated: "2018-04-29T11:45:05.000Z"))
            #expect(try f.trip()?[1] == "0")
        case .clientWins:
            #expect(results.map(\.status) == [.applied])
            #expect(results[0].row == tripRow(seats: 1, created: Self.created, updated: "2018-04-29T11:30:01.000Z"))
        }
    }

    /// Newest-wins in the other direction: the device's edit is later than the server's change, so it wins.
    @Test func newerEditWinsUnderNewestWins() async throws {
        let f = try await MergeFixture.make(rule: .newestWins, clock: "2018-04-29T12:00:00.000Z")
        defer { f.close() }
        try f.seed(created: Self.created, updated: "2018-04-29T11:45:05.000Z")
        let results = try await f.push(
            [change(.update, values: ["seats": .int(3)], edited: "2018-04-29T11:50:00.000Z", base: Self.created)],
            sentAt: "2018-04-29T12:00:00.000Z")
        #expect(results.map(\.status) == [.applied])
        #expect(results[0].row?["updated_at"] == .string("2018-04-29T12:00:00.000Z"))
    }

    /// Table 4.3.4, rows 1–2: removing a row that was updated on the server since the device's copy.
    @Test(arguments: MergeRule.allCases)
    func table434DeleteOfRowUpdatedOnServer(rule: MergeRule) async throws {
        let f = try await MergeFixture.make(rule: rule, clock: "2018-04-29T11:50:00.000Z")
        defer { f.close() }
        try f.seed(seats: 2, created: Self.created, updated: "2018-04-29T11:45:05.000Z")
        let results = try await f.push(
            [change(.delete, edited: "2018-04-29T11:49:00.000Z", base: Self.created)],
            sentAt: "2018-04-29T11:50:00.000Z")
        switch rule {
        case .newestWins, .serverWins:
            // Returns the updated object; the device puts it back.
            #expect(results.map(\.status) == [.rejected])
            #expect(results[0].row == tripRow(seats: 2, created: Self.created, updated: "2018-04-29T11:45:05.000Z"))
            #expect(try f.trip() != nil)
            #expect(try f.count("SELECT count(*) FROM ferry_tombstones") == 0)
        case .clientWins:
            #expect(results.map(\.status) == [.applied])
            #expect(results[0].row == nil)
            #expect(try f.trip() == nil)
            #expect(
                try f.count("SELECT count(*) FROM ferry_tombstones WHERE tbl = 'trips' AND key = '{\"id\":1}'") == 1)
        }
    }

    /// A delete of a row unchanged since the device saw it deletes under every rule and leaves a tombstone.
    @Test(arguments: MergeRule.allCases)
    func deleteWithoutConflictLeavesTombstone(rule: MergeRule) async throws {
        let f = try await MergeFixture.make(rule: rule, clock: "2018-04-29T11:50:00.000Z")
        defer { f.close() }
        try f.seed(created: Self.created, updated: Self.created)
        let results = try await f.push(
            [change(.delete, edited: "2018-04-29T11:49:00.000Z", base: Self.created)],
            sentAt: "2018-04-29T11:50:00.000Z")
        #expect(results.map(\.status) == [.applied])
        #expect(try f.trip() == nil)
        #expect(
            try f.pg.query(
                "SELECT dataset, tbl, key::text, to_char(deleted_at AT TIME ZONE 'UTC', 'HH24:MI:SS') FROM ferry_tombstones"
            )
                == [["trips", "trips", "{\"id\": 1}", "11:50:00"]])
    }

    /// Table 4.3.4, row 3: updating a row already deleted on the server answers gone; nothing is written.
    @Test(arguments: MergeRule.allCases)
    func table434UpdateAfterDeleteIsGone(rule: MergeRule) async throws {
        let f = try await MergeFixture.make(rule: rule, clock: "2018-04-29T11:50:00.000Z")
        defer { f.close() }
        try f.seed(created: Self.created, updated: Self.created)
        // Device 2 deletes it…
        let deleted = try await f.push(
            [change(.delete, edited: "2018-04-29T11:49:00.000Z", base: Self.created)],
            sentAt: "2018-04-29T11:50:00.000Z", client: "device-2")
        #expect(deleted.map(\.status) == [.applied])
        // …then device 1, offline since, updates it (newer edit, which would win a conflict).
        f.clock.set("2018-04-29T12:00:00.000Z")
        let results = try await f.push(
            [change(.update, values: ["seats": .int(5)], edited: "2018-04-29T11:59:00.000Z", base: Self.created)],
            sentAt: "2018-04-29T12:00:00.000Z")
        #expect(results.map(\.status) == [.gone])
        #expect(results[0].row == nil)
        #expect(try f.trip() == nil)
        // And inserting the deleted key again is gone too (the tombstone answers it).
        let reinsert = try await f.push(
            [
                change(
                    .insert, values: ["name": .string("Växjö-Kalmar"), "seats": .int(0), "stops": .int(0)],
                    edited: "2018-04-29T11:59:30.000Z")
            ],
            sentAt: "2018-04-29T12:00:00.000Z")
        #expect(reinsert.map(\.status) == [.gone])
        #expect(try f.trip() == nil)
    }

    /// Inserting a key that already exists is a conflict settled by the rule.
    @Test(arguments: MergeRule.allCases)
    func insertOfExistingKeyIsAConflict(rule: MergeRule) async throws {
        let f = try await MergeFixture.make(rule: rule, clock: "2018-04-29T12:00:00.000Z")
        defer { f.close() }
        try f.seed(seats: 4, created: Self.created, updated: "2018-04-29T11:45:05.000Z")
        let results = try await f.push(
            [
                change(
                    .insert, values: ["name": .string("Kalmar-Växjö"), "seats": .int(9), "stops": .int(1)],
                    edited: "2018-04-29T11:50:00.000Z")
            ],
            sentAt: "2018-04-29T12:00:00.000Z")
        switch rule {
        case .serverWins:
            #expect(results.map(\.status) == [.rejected])
            #expect(results[0].row?["seats"] == .int(4))
        case .newestWins, .clientWins:
            // 11:50 (device) is later than 11:45:05 (server): newest-wins applies as well.
            #expect(results.map(\.status) == [.applied])
            #expect(
                results[0].row
                    == tripRow(
                        name: "Kalmar-Växjö", seats: 9, stops: 1, created: Self.created,
                        updated: "2018-04-29T12:00:00.000Z"))
        }
    }

    /// PostgreSQL keeps microseconds; the device's base carries milliseconds. Equal at millisecond precision is
    /// no conflict, even under server-wins.
    @Test func baseComparesAtMillisecondPrecision() async throws {
        let f = try await MergeFixture.make(rule: .serverWins, clock: "2018-04-29T12:00:00.000Z")
        defer { f.close() }
        try f.seed(created: Self.created, updated: "2018-04-29 11:21:02.123456+00")
        let results = try await f.push(
            [
                change(
                    .update, values: ["seats": .int(1)], edited: "2018-04-29T11:59:00.000Z",
                    base: "2018-04-29T11:21:02.123Z")
            ],
            sentAt: "2018-04-29T12:00:00.000Z")
        #expect(results.map(\.status) == [.applied])
        // What the server stamps is whole milliseconds, so the next base compares exactly.
        #expect(try f.trip()?[4] == "2018-04-29T12:00:00.000000Z")
    }
}
