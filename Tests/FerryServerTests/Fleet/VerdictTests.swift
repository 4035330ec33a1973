import FerryCore
import Foundation
import Testing

@testable import FerryServer

/// The one-line verdict from facts alone (the end-to-end tests in ExplainTests cover each verdict against the real
/// server; these pin the precedence and the verdicts those cannot reach cheaply).
@Suite("Fleet: the verdict's precedence")
struct VerdictTests {
    static func record(held: Int?) -> DeviceRecord {
        DeviceRecord(
            dataset: "trips", device: "d-1", firstSeen: "2026-11-29T10:00:00.000Z",
            lastSeen: "2026-11-29T10:05:00.000Z",
            askedVersion: held, heldVersion: held, heldHow: nil, heldAt: nil, scope: nil, client: nil, outbox: nil,
            localError: nil, lastPush: nil, lastError: nil)
    }

    static let row = RowExplanation.Row(
        present: true, inScope: true, rule: nil, lastChangedIn: 43, changedAt: "2026-11-29T10:01:00.000Z")

    @Test("a merged edit names its lost columns and the rule")
    func merged() {
        let change = RowExplanation.Change(
            id: "c1", status: "merged", lost: ["name", "price"], message: nil, at: "2026-11-29T10:02:11.000Z")
        let verdict = RowExplainer.verdict(
            record: Self.record(held: 43), row: Self.row, changes: [change], current: 43, merge: "server-wins")
        #expect(verdict.code == "edit-merged")
        #expect(verdict.text == "the device's edit of 10:02 was merged; its values of name, price lost to server-wins")
    }

    @Test("never-synced comes first; out-of-scope before an edit; a later applied edit is present")
    func precedence() {
        let rejected = RowExplanation.Change(
            id: "c1", status: "rejected", lost: nil, message: nil, at: "2026-11-29T10:02:00.000Z")
        let applied = RowExplanation.Change(
            id: "c2", status: "applied", lost: nil, message: nil, at: "2026-11-29T10:03:00.000Z")
        #expect(
            RowExplainer.verdict(
                record: Self.record(held: nil), row: Self.row, changes: [rejected], current: 43, merge: nil
            )
            .code == "never-synced")
        var outside = Self.row
        outside.inScope = false
        outside.rule = "filter `tier <= :scope`"
        #expect(
            RowExplainer.verdict(
                record: Self.record(held: 43), row: outside, changes: [rejected], current: 43, merge: nil
            )
            .code == "out-of-scope")
        #expect(
            RowExplainer.verdict(
                record: Self.record(held: 43), row: Self.row, changes: [rejected, applied], current: 43, merge: nil
            ).code == "present")
        #expect(
            RowExplainer.verdict(record: Self.record(held: 41), row: Self.row, changes: [], current: 43, merge: nil)
                .text
                == "the device holds version 41; the row changed in 43: it will arrive at its next fetch")
    }

    @Test("the version a row last changed in is the first published after its updated_at")
    func versionAfter() {
        let timeline = [
            (version: 1, createdAt: "2026-11-29T09:00:00.000Z"), (version: 2, createdAt: "2026-11-29T10:00:00.000Z"),
        ]
        #expect(RowExplainer.version(after: "2026-11-29T08:59:59.999Z", in: timeline) == 1)
        #expect(RowExplainer.version(after: "2026-11-29T09:00:00.000Z", in: timeline) == 2)
        #expect(RowExplainer.version(after: "2026-11-29T10:00:00.001Z", in: timeline) == nil)
        #expect(RowExplainer.version(after: nil, in: timeline) == nil)
    }
}
