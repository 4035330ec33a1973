import FerryCore
import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryMerge

/// The merge decision and the clock normalisation as pure functions (no I/O).
@Suite struct MergeDecisionTests {
    typealias D = MergeDecision
    static let row = D.ServerRow(updatedMillis: 1_000)

    static func decide(
        _ op: Change.Operation, _ rule: MergeRule, row: D.ServerRow? = MergeDecisionTests.row, tombstoned: Bool = false,
        base: Int64?, edited: Int64
    ) -> String {
        switch D.decide(op: op, rule: rule, row: row, tombstoned: tombstoned, baseMillis: base, editedMillis: edited) {
        case .insert: return "insert"
        case .update: return "update"
        case .delete: return "delete"
        case .reject: return "reject"
        case .gone: return "gone"
        case .merge: return "merge"
        }
    }

    @Test(arguments: MergeRule.allCases)
    func noConflictAppliesUnderEveryRule(rule: MergeRule) {
        #expect(Self.decide(.update, rule, base: 1_000, edited: 10) == "update")
        #expect(Self.decide(.delete, rule, base: 1_000, edited: 10) == "delete")
        #expect(Self.decide(.insert, rule, row: nil, base: nil, edited: 10) == "insert")
    }

    @Test func conflictsFollowTheRule() {
        // Update whose base is older than the server row.
        #expect(Self.decide(.update, .newestWins, base: 500, edited: 1_001) == "update")
        #expect(Self.decide(.update, .newestWins, base: 500, edited: 1_000) == "reject")  // a tie keeps the server row
        #expect(Self.decide(.update, .serverWins, base: 500, edited: 9_999) == "reject")
        #expect(Self.decide(.update, .clientWins, base: 500, edited: 1) == "update")
        #expect(Self.decide(.update, .serverWins, base: nil, edited: 1) == "reject")
        // Insert of an existing key.
        #expect(Self.decide(.insert, .newestWins, base: nil, edited: 2_000) == "update")
        #expect(Self.decide(.insert, .newestWins, base: nil, edited: 999) == "reject")
        #expect(Self.decide(.insert, .serverWins, base: nil, edited: 2_000) == "reject")
        #expect(Self.decide(.insert, .clientWins, base: nil, edited: 0) == "update")
        // Delete of a row updated since the base (thesis Table 4.3.4).
        #expect(Self.decide(.delete, .newestWins, base: 500, edited: 2_000) == "reject")
        #expect(Self.decide(.delete, .serverWins, base: 500, edited: 2_000) == "reject")
        #expect(Self.decide(.delete, .clientWins, base: 500, edited: 0) == "delete")
    }

    @Test(arguments: MergeRule.allCases)
    func missingRowsAreGone(rule: MergeRule) {
        #expect(Self.decide(.update, rule, row: nil, tombstoned: true, base: 1_000, edited: 5_000) == "gone")
        #expect(Self.decide(.update, rule, row: nil, base: 1_000, edited: 5_000) == "gone")
        #expect(Self.decide(.delete, rule, row: nil, tombstoned: true, base: 1_000, edited: 5_000) == "gone")
        #expect(Self.decide(.insert, rule, row: nil, tombstoned: true, base: nil, edited: 5_000) == "gone")
    }

    @Test func normalisationShiftsByTheOffsetAndClampsToNow() {
        // Device one hour ahead: edited 11:00 device = 10:00 server.
        #expect(
            D.normalise(editedMillis: 11 * 3_600_000, sentMillis: 12 * 3_600_000, serverNowMillis: 11 * 3_600_000) == 10
                * 3_600_000)
        // Device behind by a year: shifted forward.
        #expect(D.normalise(editedMillis: 0, sentMillis: 10, serverNowMillis: 31_536_000_010) == 31_536_000_000)
        // editedAt after sentAt (a clock that jumped): clamped to server now.
        #expect(D.normalise(editedMillis: 5_000, sentMillis: 1_000, serverNowMillis: 2_000) == 2_000)
        // Absurd values do not overflow.
        #expect(D.normalise(editedMillis: .max, sentMillis: .min, serverNowMillis: 7) == 7)
    }
}

/// The request body checks: a malformed body is a 400 and nothing is applied.
@Suite struct ChangeRequestTests {
    static let good =
        #"{"clientId":"d1","sentAt":"2026-11-21T10:00:00.000Z","changes":[{"id":"c1","table":"trips","op":"update","key":{"id":1},"values":{"seats":1},"editedAt":"2026-11-21T09:59:00.000Z","baseUpdatedAt":null}]}"#

    func message(_ body: String, limits: ChangeRequest.Limits = .init()) -> String {
        do {
            _ = try ChangeRequest.decode(Data(body.utf8), limits: limits)
            return "accepted"
        } catch let error as FerryError {
            #expect(error.code == .badInput)
            return error.description
        } catch {
            return "unexpected \(error)"
        }
    }

    @Test func acceptsAWellFormedBatch() throws {
        let batch = try ChangeRequest.decode(Data(Self.good.utf8))
        #expect(batch.clientId == "d1")
        #expect(batch.changes.first?.values == ["seats": .int(1)])
        #expect(batch.changes.first?.baseUpdatedAt == nil)
    }

    @Test func rejectsMalformedBodies() {
        #expect(message("not json").contains("not valid JSON"))
        #expect(message("").contains("not valid JSON"))
        #expect(message("[]").contains("wrong type"))
        #expect(message(#"{"sentAt":"2026-11-21T10:00:00.000Z","changes":[]}"#).contains("missing field 'clientId'"))
        #expect(
            message(Self.good.replacingOccurrences(of: #""editedAt":"2026-11-21T09:59:00.000Z","#, with: "")).contains(
                "missing field 'changes[0].editedAt'"))
        #expect(
            message(Self.good.replacingOccurrences(of: #""op":"update""#, with: #""op":"upsert""#)).contains(
                "changes[0].op"))
        #expect(
            message(Self.good.replacingOccurrences(of: #""values":{"seats":1}"#, with: #""values":{"seats":[1]}"#))
                .contains("changes[0].values"))
        #expect(message(Self.good.replacingOccurrences(of: "2026-11-21T10:00:00.000Z", with: "now")).contains("sentAt"))
        #expect(
            message(Self.good.replacingOccurrences(of: #""clientId":"d1""#, with: #""clientId":"""#)).contains(
                "clientId"))
        #expect(message(Self.good.replacingOccurrences(of: #""id":"c1""#, with: #""id":"""#)).contains("changes[0].id"))
    }

    @Test func enforcesSizeAndCountLimits() {
        let body = Self.good
        #expect(message(body, limits: .init(maxBodyBytes: body.utf8.count)) == "accepted")
        #expect(
            message(body, limits: .init(maxBodyBytes: body.utf8.count - 1)).contains(
                "over the limit of \(body.utf8.count - 1) bytes"))
        let one =
            #"{"id":"c","table":"t","op":"delete","key":{"id":1},"values":{},"editedAt":"2026-11-21T09:59:00.000Z"}"#
        let many =
            #"{"clientId":"d1","sentAt":"2026-11-21T10:00:00.000Z","changes":["#
            + Array(repeating: one, count: 10_001).joined(separator: ",") + "]}"
        #expect(message(many).contains("10001 changes, over the limit of 10000"))
        #expect(ChangeRequest.Limits().maxBodyBytes == 8 * 1024 * 1024)
    }
}
