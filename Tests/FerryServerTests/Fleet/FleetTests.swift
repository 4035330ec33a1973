import FerryCore
import FerryPostgres
import Foundation
import Logging
import Testing

@testable import FerryServer

/// The fleet itself: what a device's requests leave in `ferry_devices`, that a restart keeps it, and that a flood
/// of made-up ids keeps it (and the server's memory) within its bounds.
@Suite("Fleet: ferry_devices")
struct FleetTests {
    @Test("a synced device is listed with its versions, scope and client; a restart keeps it; the page sorts it")
    func restartKeepsTheFleet() async throws {
        let (database, directory) = try await FleetWorld.prepared("fleet-restart")
        defer {
            database.drop()
            directory.remove()
        }
        let device = Locked("")
        try await FleetWorld.serve(database: database, directory: directory) { world in
            device.withLock { $0 = "" }
            let id = try await world.sync("alice")
            device.withLock { $0 = id }
            let list = try await world.get(
                "/v1/devices?dataset=\(FleetWorld.dataset)", bearer: FleetWorld.statusToken)
            #expect(list.status == 200)
            let records = try JSONDecoder().decode(Devices.self, from: list.body).devices
            let record = try #require(records.first { $0.device == id })
            #expect(record.heldVersion == 1)
            #expect(record.askedVersion == 1)
            #expect(record.scope == "0")
            #expect(record.client == "ferry-swift/0.1.0")
            // Without the status token: 401
            #expect(try await world.get("/v1/devices").status == 401)
        }
        let id = device.withLock { $0 }
        // When the server restarts over the same database
        try await FleetWorld.serve(database: database, directory: directory) { world in
            let one = try await world.get("/v1/devices/\(id)", bearer: FleetWorld.statusToken)
            #expect(one.status == 200)
            #expect(String(decoding: one.body, as: UTF8.self).contains(#""heldVersion":1"#))
            #expect(try await world.get("/v1/devices/not-seen", bearer: FleetWorld.statusToken).status == 404)
            let page = try await world.get("/status/devices?sort=device&order=asc", bearer: FleetWorld.statusToken)
            #expect(page.status == 200)
            #expect(String(decoding: page.body, as: UTF8.self).contains("data-device=\"\(id)\""))
        }
    }

    @Test("100,000 made-up ids: the table stays within its bound, and the notes waiting in memory too")
    func floodStaysBounded() async throws {
        let database = try TestDatabase.create("fleet-flood")
        defer { database.drop() }
        let sightings = DeviceSightings(limit: 1_000, noteLimit: 5_000)
        let fleet = DeviceFleet(
            sightings: sightings, databaseURL: database.url, retention: .seconds(86_400), limit: 2_000,
            flushInterval: .seconds(60), logger: Logger(label: "fleet-test"))
        defer { fleet.shutdown() }
        try await fleet.start()
        var most = 0
        for round in 0..<20 {
            // Off the cooperative pool: 5,000 sightings hold a thread for a while, and other tests' servers run there
            let pending = try await offCooperativePool {
                for i in 0..<5_000 { sightings.record(id: "flood-\(round)-\(i)", dataset: "trips") }
                return sightings.pendingCount
            }
            most = max(most, pending)
            try await fleet.flush()
        }
        #expect(most <= 5_000)
        let count = try await fleet.pool.withConnection { pg in try FleetTable.count(on: pg) }
        #expect(count == 2_000)
        // The devices kept are the most recently seen
        let kept = try await fleet.devices(dataset: "trips", limit: 1)
        #expect(kept.first?.device.hasPrefix("flood-19-") == true)
        // And a device unseen for longer than the retention is forgotten
        let old = DeviceNote(lastSeen: Date().addingTimeInterval(-2 * 86_400))
        sightings.note(id: "ancient", dataset: "trips", old)
        try await fleet.flush()
        let ancient = try await fleet.device("ancient", dataset: String?.none)
        #expect(ancient.isEmpty)
    }

    @Test("an HTTP flood of made-up Ferry-Device ids keeps the table within its bound")
    func httpFloodStaysBounded() async throws {
        let limit: @Sendable (inout ServerConfiguration) -> Void = { $0.database?.deviceLimit = 300 }
        try await FleetWorld.with("fleet-http-flood", configure: limit) { world in
            for batch in 0..<10 {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for i in 0..<100 {
                        group.addTask {
                            _ = try await world.get(
                                "/v1/datasets/\(FleetWorld.dataset)/manifest",
                                headers: ["Ferry-Device": "made-up-\(batch)-\(i)"])
                        }
                    }
                    try await group.waitForAll()
                }
            }
            let list = try await world.get("/v1/devices?limit=100000", bearer: FleetWorld.statusToken)
            let devices = try JSONDecoder().decode(Devices.self, from: list.body).devices
            #expect(devices.count == 300)
            // Each was answered 401 (no token): kept as its last error
            #expect(devices.allSatisfy { $0.lastError?.status == 401 })
        }
    }

    struct Devices: Decodable {
        let devices: [DeviceRecord]
    }
}
