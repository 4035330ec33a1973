import FerryCore
import Foundation
import Testing

@testable import FerryServer

/// `ferry explain` against the real server, PostgreSQL and real devices (the `ferry` binary): one test per verdict,
/// and the errors (an unknown device or dataset exits 1 naming it; a malformed --row exits 2 naming the form).
@Suite("Fleet: ferry explain, one verdict each")
struct ExplainTests {
    @Test("a row outside the device's scope: out-of-scope, naming the filter")
    func outOfScope() async throws {
        try await FleetWorld.with("explain-scope") { world in
            let device = try await world.sync("alice")
            let (run, answer) = try await world.explain(device, row: "campgrounds:\(FleetWorld.premium)")
            #expect(run.status == 0, "\(run.stderr)")
            let explanation = try #require(answer)
            #expect(explanation.device == device)
            #expect(explanation.deviceVersion == 1)
            #expect(explanation.currentVersion == 1)
            #expect(explanation.row.present)
            #expect(!explanation.row.inScope)
            #expect(explanation.row.rule == "filter `tier <= :scope`")
            #expect(explanation.verdict.code == "out-of-scope")
            #expect(explanation.verdict.text == "the row is outside scope 0 (filter `tier <= :scope`)")
        }
    }

    @Test("a row changed after the device's version: will-arrive, with both versions")
    func willArrive() async throws {
        try await FleetWorld.with("explain-arrive") { world in
            let device = try await world.sync("alice")
            try await world.sql(
                "UPDATE campgrounds SET price_per_night = 19, updated_at = now() WHERE id = '\(FleetWorld.free)'")
            try await world.publish()
            try await world.waitForVersion(2)
            let (run, answer) = try await world.explain(device, row: "campgrounds:\(FleetWorld.free)")
            #expect(run.status == 0, "\(run.stderr)")
            let explanation = try #require(answer)
            #expect(explanation.deviceVersion == 1)
            #expect(explanation.currentVersion == 2)
            #expect(explanation.row.present && explanation.row.inScope)
            #expect(explanation.row.lastChangedIn == 2)
            #expect(explanation.verdict.code == "will-arrive")
            #expect(
                explanation.verdict.text
                    == "the device holds version 1; the row changed in 2: it will arrive at its next fetch")
            // And the text form says the same in lines
            let text = try await world.ferry([
                "explain", "--server", world.server, "--status-token", FleetWorld.statusToken, "--dataset",
                FleetWorld.dataset, "--device", device, "--row", "campgrounds:\(FleetWorld.free)",
            ])
            #expect(text.status == 0)
            #expect(text.stdout.contains("verdict (will-arrive): the device holds version 1"))
        }
    }

    @Test("a row another device deleted after this device's version: deleted, in which version")
    func deleted() async throws {
        try await FleetWorld.with("explain-deleted") { world in
            // Riverbend (tier 0) without its reviews and photos, so a device may delete it
            let riverbend = "0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e05"
            try await world.sql(
                "DELETE FROM reviews WHERE campground_id = '\(riverbend)'; DELETE FROM photos WHERE campground_id = '\(riverbend)'"
            )
            let device = try await world.sync("alice")
            _ = try await world.sync("bob", token: FleetWorld.bob)
            let edit = try await world.ferry([
                "exec", "--dir", world.dir("bob"), "DELETE FROM campgrounds WHERE id = '\(riverbend)'",
            ])
            #expect(edit.status == 0, "\(edit.stderr)")
            let push = try await world.ferry(
                [
                    "push", "--server", world.server, "--dataset", FleetWorld.dataset, "--dir", world.dir("bob"),
                    "--json",
                ],
                token: FleetWorld.bob)
            #expect(push.status == 0, "\(push.stderr)")
            #expect(push.stdout.contains(#""applied":1"#), "\(push.stdout)")
            try await world.publish()
            try await world.waitForVersion(2)
            let (run, answer) = try await world.explain(device, row: "campgrounds:\(riverbend)")
            #expect(run.status == 0, "\(run.stderr)")
            let explanation = try #require(answer)
            #expect(!explanation.row.present)
            #expect(explanation.row.lastChangedIn == 2)
            #expect(explanation.verdict.code == "deleted")
            #expect(
                explanation.verdict.text
                    == "the row was deleted in version 2; the device's copy is from before (it holds 1)")
        }
    }

    @Test("the device's edit lost to a newer server change: edit-rejected, with the change's verdict")
    func editRejected() async throws {
        try await FleetWorld.with("explain-rejected") { world in
            let device = try await world.sync("alice")
            let edit = try await world.ferry([
                "exec", "--dir", world.dir("alice"),
                "UPDATE campgrounds SET name = 'Pine Hollow (closed)' WHERE id = '\(FleetWorld.free)'",
            ])
            #expect(edit.status == 0, "\(edit.stderr)")
            // The server's row changes after the edit, a day ahead: newest-wins keeps the server's however long the push
            // takes (the server shifts the edit's time by the push's delay)
            try await world.sql(
                "UPDATE campgrounds SET name = 'Pine Hollow Park', updated_at = now() + interval '1 day' WHERE id = '\(FleetWorld.free)'"
            )
            let push = try await world.ferry(
                ["push", "--server", world.server, "--dataset", FleetWorld.dataset, "--dir", world.dir("alice")],
                token: FleetWorld.alice)
            #expect(push.status == 0, "\(push.stderr)")
            let (run, answer) = try await world.explain(device, row: "campgrounds:\(FleetWorld.free)")
            #expect(run.status == 0, "\(run.stderr)")
            let explanation = try #require(answer)
            #expect(explanation.changes.map(\.status) == ["rejected"])
            #expect(explanation.verdict.code == "edit-rejected")
            #expect(explanation.verdict.text.hasPrefix("the device's edit of "))
            #expect(explanation.verdict.text.hasSuffix(" was rejected: newest-wins"))
            // And the device's half shows the edit kept among its rejected edits
            let local = try await world.ferry([
                "explain", "--dir", world.dir("alice"), "--row", "campgrounds:\(FleetWorld.free)",
            ])
            #expect(local.status == 0, "\(local.stderr)")
            #expect(local.stdout.contains("rejected edits kept: 1"), "\(local.stdout)")
            #expect(local.stdout.contains("queued edits of it: 0"))
        }
    }

    @Test("an applied edit, published and fetched: present, with the applied change")
    func appliedEditPresent() async throws {
        try await FleetWorld.with("explain-applied") { world in
            let device = try await world.sync("alice")
            let edit = try await world.ferry([
                "exec", "--dir", world.dir("alice"),
                "UPDATE campgrounds SET name = 'Pine Hollow North' WHERE id = '\(FleetWorld.free)'",
            ])
            #expect(edit.status == 0, "\(edit.stderr)")
            let push = try await world.ferry(
                ["push", "--server", world.server, "--dataset", FleetWorld.dataset, "--dir", world.dir("alice")],
                token: FleetWorld.alice)
            #expect(push.status == 0, "\(push.stderr)")
            try await world.publish()
            try await world.waitForVersion(2)
            try await world.sync("alice")
            let (run, answer) = try await world.explain(device, row: "campgrounds:\(FleetWorld.free)")
            #expect(run.status == 0, "\(run.stderr)")
            let explanation = try #require(answer)
            #expect(explanation.deviceVersion == 2)
            #expect(explanation.row.lastChangedIn == 2)
            #expect(explanation.changes.map(\.status) == ["applied"])
            #expect(explanation.verdict.code == "present")
            #expect(
                explanation.verdict.text == "the device holds version 2, which has the row as last changed in version 2"
            )
            // And the device's half, with no server: in database.db, nothing queued or rejected
            let local = try await world.ferry([
                "explain", "--dir", world.dir("alice"), "--row", "campgrounds:\(FleetWorld.free)", "--json",
            ])
            #expect(local.status == 0, "\(local.stderr)")
            let half = try #require(
                try JSONSerialization.jsonObject(with: Data(local.stdout.utf8)) as? [String: Any])
            #expect(half["inDatabase"] as? Bool == true)
            #expect(half["version"] as? Int == 2)
            #expect((half["outbox"] as? [Any])?.isEmpty == true)
            #expect((half["rejected"] as? [Any])?.isEmpty == true)
            #expect(half["device"] as? String == device)
        }
    }

    @Test("a device the server saw but that never downloaded: never-synced (its 401 is kept too)")
    func neverSynced() async throws {
        try await FleetWorld.with("explain-never") { world in
            let fetch = try await world.ferry(
                ["fetch", "--server", world.server, "--dataset", FleetWorld.dataset, "--dir", world.dir("eve")],
                token: "wrong-token")
            #expect(fetch.status != 0)
            let device = try await world.deviceID("eve")
            let (run, answer) = try await world.explain(device, row: "campgrounds:\(FleetWorld.free)")
            #expect(run.status == 0, "\(run.stderr)")
            let explanation = try #require(answer)
            #expect(explanation.deviceVersion == nil)
            #expect(explanation.verdict.code == "never-synced")
            #expect(run.stdout.contains(#""deviceVersion":null"#))
            let one = try await world.get("/v1/devices/\(device)", bearer: FleetWorld.statusToken)
            #expect(one.status == 200)
            let record = try JSONDecoder().decode(DevicesOne.self, from: one.body).datasets.first
            #expect(record?.lastError?.status == 401)
            #expect(record?.client == "ferry-swift/0.1.0")
        }
    }

    @Test("an unknown device or dataset exits 1 naming it; a malformed --row exits 2 naming TABLE:KEY")
    func errors() async throws {
        try await FleetWorld.with("explain-errors") { world in
            let device = try await world.sync("alice")
            let unknown = try await world.explain("no-such-device", row: "campgrounds:x").run
            #expect(unknown.status == 1)
            #expect(unknown.stderr.contains("unknown device 'no-such-device'"))
            let dataset = try await world.explain(device, row: "campgrounds:x", dataset: "nope").run
            #expect(dataset.status == 1)
            #expect(dataset.stderr.contains("unknown dataset 'nope'"))
            for row in ["campgrounds", "campgrounds:", ":x", "campgrounds:a,"] {
                let bad = try await world.explain(device, row: row).run
                #expect(bad.status == 2, "\(row)")
                #expect(bad.stderr.contains("TABLE:KEY"), "\(row): \(bad.stderr)")
                #expect(bad.stderr.contains("TABLE:K1,K2"))
            }
            // A key of the wrong shape for the table is the server's 400, also exit 2
            let shape = try await world.explain(device, row: "campgrounds:a,b").run
            #expect(shape.status == 2)
            #expect(shape.stderr.contains("campgrounds:ID"))
        }
    }

    struct DevicesOne: Decodable {
        let device: String
        let datasets: [DeviceRecord]
    }
}
