import FerryCore
import FerryPostgres
import FerryTestSupport
import Foundation
import Logging
import Testing

@testable import FerryMerge

/// Per-column merging and additive columns against PostgreSQL (docs/merge-rules.md, "Per-column merging"): the
/// thesis' trips table with `merge: {rule: …, per: column, add: [stops]}`.
@Suite struct ColumnMergeTests {
    static let base = "2026-11-21T09:00:00.000Z"

    static func fixture(rule: MergeRule = .newestWins, columns: ColumnMerge) async throws -> MergeFixture {
        var trips = MergeTable(name: "trips", source: "trips", writable: true, merge: rule)
        trips.columnMerge = columns
        return try await MergeFixture.make(
            tables: [trips, MergeTable(name: "routes", source: "public.routes", writable: false)],
            clock: "2026-11-21T10:00:00.000Z")
    }

    /// An update carrying the base of each column it changes.
    static func edit(
        _ values: [String: JSONValue], bases: [String: JSONValue]?, edited: String, id: String = UUID().uuidString
    ) -> Change {
        var made = change(.update, values: values, edited: edited, base: ColumnMergeTests.base, changeID: id)
        made.base = bases
        return made
    }

    @Test("two devices edit different columns offline: both are written, in either order", arguments: [false, true])
    func differentColumns(reversed: Bool) async throws {
        let f = try await Self.fixture(columns: ColumnMerge(perColumn: true))
        defer { f.close() }
        try f.seed(created: Self.base, updated: Self.base)
        let a = Self.edit(["name": .string("Kalmar")], bases: ["name": .string("Växjö-Kalmar")], edited: Self.base)
        let b = Self.edit(["seats": .int(4)], bases: ["seats": .int(0)], edited: Self.base)
        let (first, second) = reversed ? (b, a) : (a, b)
        #expect(
            try await f.push([first], sentAt: "2026-11-21T10:00:00.000Z", client: "one").map(\.status) == [.applied])
        f.clock.set("2026-11-21T10:05:00.000Z")
        let answer = try await f.push([second], sentAt: "2026-11-21T10:05:00.000Z", client: "two")
        #expect(answer.map(\.status) == [.applied])
        #expect(answer[0].lost == nil)
        #expect(try f.trip()?[0...1] == ["Kalmar", "4"])
    }

    @Test("the same column: the rule decides; the loser is merged, with the server's row and its lost column")
    func sameColumn() async throws {
        for rule in MergeRule.allCases {
            let f = try await Self.fixture(rule: rule, columns: ColumnMerge(perColumn: true))
            defer { f.close() }
            try f.seed(created: Self.base, updated: Self.base)
            let a = Self.edit(["seats": .int(1)], bases: ["seats": .int(0)], edited: "2026-11-21T09:30:00.000Z")
            #expect(
                try await f.push([a], sentAt: "2026-11-21T10:00:00.000Z", client: "one").map(\.status) == [.applied])
            f.clock.set("2026-11-21T10:05:00.000Z")
            // B also renames the trip: no conflict there, so that column is written whatever the rule.
            let b = Self.edit(
                ["seats": .int(2), "name": .string("Kalmar")],
                bases: ["seats": .int(0), "name": .string("Växjö-Kalmar")],
                edited: "2026-11-21T09:45:00.000Z")
            let answer = try await f.push([b], sentAt: "2026-11-21T10:05:00.000Z", client: "two")
            switch rule {
            case .newestWins, .serverWins:
                #expect(answer.map(\.status) == [.merged], "\(rule)")
                #expect(answer[0].lost == ["seats"])
                #expect(answer[0].row?["seats"] == .int(1) && answer[0].row?["name"] == .string("Kalmar"))
                #expect(try f.trip()?[0...1] == ["Kalmar", "1"])
            case .clientWins:
                #expect(answer.map(\.status) == [.applied])
                #expect(try f.trip()?[0...1] == ["Kalmar", "2"])
            }
        }
    }

    @Test("every column lost: merged, nothing written, the answer is the server's row")
    func everyColumnLost() async throws {
        let f = try await Self.fixture(columns: ColumnMerge(perColumn: true))
        defer { f.close() }
        try f.seed(seats: 5, created: Self.base, updated: "2026-11-21T09:50:00.000Z")
        let b = Self.edit(["seats": .int(2)], bases: ["seats": .int(0)], edited: "2026-11-21T09:45:00.000Z")
        let answer = try await f.push([b], sentAt: "2026-11-21T10:00:00.000Z")
        #expect(answer.map(\.status) == [.merged] && answer[0].lost == ["seats"])
        #expect(answer[0].row == tripRow(seats: 5, created: Self.base, updated: "2026-11-21T09:50:00.000Z"))
        #expect(try f.trip()?[4] == "2026-11-21T09:50:00.000000Z")
    }

    @Test("a device without base values is merged row by row, as before")
    func withoutBases() async throws {
        let f = try await Self.fixture(columns: ColumnMerge(perColumn: true, additive: ["stops"]))
        defer { f.close() }
        try f.seed(stops: 10, created: Self.base, updated: "2026-11-21T09:50:00.000Z")
        // A different column than the server's write, but no bases: the row changed since, and the edit is older.
        let old = change(
            .update, values: ["name": .string("Kalmar"), "stops": .int(7)], edited: "2026-11-21T09:45:00.000Z",
            base: Self.base)
        let answer = try await f.push([old], sentAt: "2026-11-21T10:00:00.000Z")
        #expect(answer.map(\.status) == [.rejected] && answer[0].lost == nil)
        // A newer edit without bases overwrites the additive column with its value, as a row-level write.
        let newer = change(.update, values: ["stops": .int(7)], edited: "2026-11-21T09:59:00.000Z", base: Self.base)
        #expect(try await f.push([newer], sentAt: "2026-11-21T10:00:00.000Z").map(\.status) == [.applied])
        #expect(try f.trip()?[2] == "7")
    }

    @Test("plain newest-wins ignores bases: the answers are those of a change without them")
    func rowLevelIgnoresBases() async throws {
        var answers: [[ChangeResult]] = []
        for withBases in [false, true] {
            let f = try await Self.fixture(columns: .rowLevel)
            defer { f.close() }
            try f.seed(created: Self.base, updated: "2026-11-21T09:50:00.000Z")
            let edits = [
                Self.edit(
                    ["seats": .int(2)], bases: withBases ? ["seats": .int(0)] : nil, edited: "2026-11-21T09:45:00.000Z",
                    id: "c1"),
                Self.edit(
                    ["stops": .int(3)], bases: withBases ? ["stops": .int(0)] : nil, edited: "2026-11-21T09:55:00.000Z",
                    id: "c2"),
            ]
            answers.append(try await f.push(edits, sentAt: "2026-11-21T10:00:00.000Z"))
        }
        #expect(answers[0] == answers[1])
        #expect(answers[0].map(\.status) == [.rejected, .applied])
        #expect(String(decoding: AnswerJSON.encodeArray(answers[0]), as: UTF8.self).contains("lost") == false)
    }

    @Test("additive: 20 devices take from one counter at once, each batch sent twice: the sum is exact")
    func additiveUnderConcurrency() async throws {
        let f = try await Self.fixture(columns: ColumnMerge(additive: ["stops"]))
        defer { f.close() }
        try f.seed(stops: 1000, created: Self.base, updated: Self.base)
        // Device i saw 1000 and took i + 1.
        let batches = (0..<20).map { i in
            ChangeBatch(
                clientId: "device-\(i)", sentAt: "2026-11-21T10:00:00.000Z",
                changes: [
                    Self.edit(
                        ["stops": .int(1000 - Int64(i + 1))], bases: ["stops": .int(1000)],
                        edited: "2026-11-21T09:0\(i % 10):00.000Z", id: "take-\(i)")
                ])
        }
        let merger = f.merger
        try await withThrowingTaskGroup(of: [ChangeResult].self) { group in
            for batch in batches + batches {
                group.addTask { try await merger.apply(batch).results }
            }
            for try await answer in group { #expect(answer.map(\.status) == [.applied]) }
        }
        #expect(try f.trip()?[2] == String(1000 - (1...20).reduce(0, +)))
        #expect(try f.count("SELECT count(*) FROM ferry_changes") == 20)
    }

    /// A batch resent while it is still being merged (a device that timed out) is written once: the later copies'
    /// answers' INSERT fails on the ids, they are rolled back and redone with the stored answers looked up.
    @Test("additive: a batch of 50 sent three times at once, five rounds: each count moves once, the same answers")
    func resentBatchUnderConcurrency() async throws {
        var trips = MergeTable(name: "trips", source: "trips", writable: true, merge: .newestWins)
        trips.columnMerge = ColumnMerge(additive: ["stops"])
        let f = try await MergeFixture.make(tables: [trips], connections: 4, clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        for id in 1...50 { try f.seed(id: id, stops: 100, created: Self.base, updated: Self.base) }
        let merger = f.merger
        for round in 1...5 {
            // Each device saw the count it left last round, and takes one.
            let batch = ChangeBatch(
                clientId: "device", sentAt: "2026-11-21T10:00:00.000Z",
                changes: (1...50).map { id in
                    var edit = Self.edit(
                        ["stops": .int(Int64(100 - round))], bases: ["stops": .int(Int64(101 - round))],
                        edited: "2026-11-21T09:00:00.000Z", id: "take-\(round)-\(id)")
                    edit.key = ["id": .int(Int64(id))]
                    return edit
                })
            let answers = try await withThrowingTaskGroup(of: [ChangeResult].self) { group in
                for _ in 0..<3 { group.addTask { try await merger.apply(batch).results } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers[0].allSatisfy { $0.status == .applied }, "round \(round)")
            #expect(answers[1] == answers[0] && answers[2] == answers[0], "round \(round)")
            for id in [1, 25, 50] { #expect(try f.trip(id)?[2] == String(100 - round), "round \(round)") }
        }
        #expect(try f.count("SELECT count(*) FROM ferry_changes") == 250)
    }

    @Test("additive with a row-level rule: the difference is added even when the other columns lose")
    func additiveBesideLostColumns() async throws {
        let f = try await Self.fixture(columns: ColumnMerge(additive: ["stops"]))
        defer { f.close() }
        try f.seed(stops: 10, created: Self.base, updated: "2026-11-21T09:50:00.000Z")
        let edit = Self.edit(
            ["stops": .int(7), "name": .string("Kalmar")], bases: ["stops": .int(10), "name": .string("Växjö-Kalmar")],
            edited: "2026-11-21T09:45:00.000Z")
        let answer = try await f.push([edit], sentAt: "2026-11-21T10:00:00.000Z")
        #expect(answer.map(\.status) == [.merged] && answer[0].lost == ["name"])
        #expect(try f.trip()?[0...2] == ["Växjö-Kalmar", "0", "7"])
        #expect(answer[0].row?["stops"] == .int(7))
    }

    @Test("each write of a row is stamped later than the one before, even from a batch that read the clock earlier")
    func monotonicStamps() async throws {
        let f = try await Self.fixture(columns: ColumnMerge(additive: ["stops"]))
        defer { f.close() }
        try f.seed(stops: 10, created: Self.base, updated: Self.base)
        let take = { (id: String) in
            Self.edit(["stops": .int(9)], bases: ["stops": .int(10)], edited: Self.base, id: id)
        }
        let later = try await f.push([take("later")], sentAt: "2026-11-21T10:00:00.000Z")
        // A batch whose clock reading came before the first one's (it waited on the row lock) commits second.
        f.clock.set("2026-11-21T09:59:59.000Z")
        let earlier = try await f.push([take("earlier")], sentAt: "2026-11-21T09:59:59.000Z")
        #expect(later[0].row?["updated_at"] == .string("2026-11-21T10:00:00.000Z"))
        #expect(earlier[0].row?["updated_at"] == .string("2026-11-21T10:00:00.001Z"))
        #expect(earlier[0].row?["stops"] == .int(8))
    }

    @Test("an additive column set to null, or a base of the wrong type, is invalid")
    func invalidBases() async throws {
        let f = try await Self.fixture(columns: ColumnMerge(perColumn: true, additive: ["stops"]))
        defer { f.close() }
        try f.seed(created: Self.base, updated: Self.base)
        let answers = try await f.push(
            [
                Self.edit(["stops": .null], bases: ["stops": .int(0)], edited: Self.base),
                Self.edit(["seats": .int(1)], bases: ["seats": .string("x")], edited: Self.base),
            ], sentAt: "2026-11-21T10:00:00.000Z")
        #expect(answers.map(\.status) == [.invalid, .invalid])
        #expect(answers[0].message?.contains("cannot be set to null") == true)
    }

    @Test("merge.add must name a numeric value column")
    func additiveColumnChecked() async throws {
        await #expect(throws: FerryError.self) {
            let f = try await Self.fixture(columns: ColumnMerge(additive: ["name"]))
            f.close()
        }
    }
}

/// The per-column decision without I/O.
@Suite struct ColumnDecisionTests {
    let row = MergeDecision.ServerRow(updatedMillis: 2_000)

    @Test("per column: only a column whose server value differs from its base conflicts")
    func perColumn() {
        let decided = MergeDecision.decideColumns(
            rule: .serverWins, perColumn: true, row: row, unchanged: [true, false, nil],
            additive: [false, false, false],
            baseMillis: 1_000, editedMillis: 3_000)
        // Column 2 has no base: judged by the row, which changed since; server-wins keeps it.
        #expect(decided.kept == [0] && decided.lost == [1, 2])
    }

    @Test("newest-wins: a conflicting column goes to the later of edit and server write")
    func newestWins() {
        for (edited, kept) in [(Int64(1_500), [Int]()), (3_000, [0])] {
            let decided = MergeDecision.decideColumns(
                rule: .newestWins, perColumn: true, row: row, unchanged: [false], additive: [false], baseMillis: 1_000,
                editedMillis: edited)
            #expect(decided.kept == kept)
        }
    }

    @Test("an additive column never conflicts; without per-column, others follow the row")
    func additive() {
        let decided = MergeDecision.decideColumns(
            rule: .serverWins, perColumn: false, row: row, unchanged: [nil, nil], additive: [true, false],
            baseMillis: 1_000, editedMillis: 3_000)
        #expect(decided.kept == [0] && decided.lost == [1])
        let unchanged = MergeDecision.decideColumns(
            rule: .serverWins, perColumn: false, row: row, unchanged: [nil], additive: [false], baseMillis: 2_000,
            editedMillis: 3_000)
        #expect(unchanged.kept == [0])
    }

    @Test("a merged answer's JSON carries its lost columns and decodes to the same value")
    func answerJSON() throws {
        let result = ChangeResult(
            id: "c", status: .merged, row: ["id": .int(1)], message: "seats changed", lost: ["seats"])
        let decoded = try JSONDecoder().decode(ChangeResult.self, from: Data(AnswerJSON.encode(result)))
        #expect(decoded == result)
        let wire = try JSONDecoder().decode(
            Change.self,
            from: Data(
                #"{"id":"c","table":"t","op":"update","key":{"id":1},"values":{"a":2},"editedAt":"x","base":{"a":1}}"#
                    .utf8))
        #expect(wire.base == ["a": .int(1)])
    }
}
