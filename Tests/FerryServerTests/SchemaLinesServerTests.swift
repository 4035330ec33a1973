import FerryCore
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import FerryServer

/// A dataset published in schema lines (docs/schema-lines.md): `?schema=` picks the newest live line a client
/// accepts, a retired line answers 410, and the status page counts each line's devices.
@Suite struct SchemaLinesServerTests {
    @Test func theManifestOfTheNewestAcceptedLineAndGoneForARetiredOne() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish("trips.v1")
        try store.publish("trips.v1")
        try store.publish("trips.v2")
        try store.publish("solo")
        var configuration = store.configuration()
        configuration.statusToken = "status-secret"

        try await store.withLiveServer(configuration) { client in
            func manifest(_ uri: String, device: String? = nil) async throws -> (HTTPResponse.Status, String?) {
                var headers: HTTPFields = [:]
                if let device { headers[HTTPField.Name("Ferry-Device")!] = device }
                let response = try await client.execute(uri: uri, method: .get, headers: headers)
                guard response.status == .ok else { return (response.status, response.bodyString) }
                return (response.status, try Manifest.decode(response.bodyData).dataset)
            }
            // The newest live line, of those accepted.
            #expect(try await manifest("/v1/datasets/trips/manifest") == (.ok, "trips.v2"))
            #expect(try await manifest("/v1/datasets/trips/manifest?schema=1", device: "device-a") == (.ok, "trips.v1"))
            #expect(
                try await manifest("/v1/datasets/trips/manifest?schema=1,2", device: "device-b") == (.ok, "trips.v2"))
            #expect(try await manifest("/v1/datasets/trips/manifest?schema=2,1,7") == (.ok, "trips.v2"))
            // Each line's own URLs, the fast path's 304 included.
            #expect(try await manifest("/v1/datasets/trips.v1/manifest", device: "device-c") == (.ok, "trips.v1"))
            let v1 = try await client.execute(uri: "/v1/datasets/trips.v1/manifest", method: .get)
            let etag = try #require(v1.header("ETag"))
            let revalidated = try await client.execute(
                uri: "/v1/datasets/trips.v1/manifest", method: .get, headers: [.ifNoneMatch: etag])
            #expect(revalidated.status == .notModified)
            let version = try await client.execute(uri: "/v1/datasets/trips.v1/versions/2", method: .get)
            let v1Manifest = try Manifest.decode(v1.bodyData)
            #expect(version.status == .ok && sha256Hex(version.body) == v1Manifest.sha256)
            // No line accepted: 404 naming the lines served; a malformed list: 400 naming the parameter.
            let none = try await manifest("/v1/datasets/trips/manifest?schema=3")
            #expect(none.0 == .notFound && none.1?.contains("lines served: 1, 2") == true, "\(none)")
            let bad = try await manifest("/v1/datasets/trips/manifest?schema=1,x")
            #expect(bad.0 == .badRequest && bad.1?.contains("schema=") == true, "\(bad)")
            // A dataset from one template ignores ?schema= (the client refuses a schema it does not know itself).
            #expect(try await manifest("/v1/datasets/solo/manifest?schema=5") == (.ok, "solo"))

            // The base name's 304 (the channel's fast path) follows the resolution: once line 3 is published, the
            // same request, byte for byte, gets line 3's manifest, not a remembered 304 of line 2's.
            let accepting = "/v1/datasets/trips/manifest?schema=1,2,3"
            let lineTwo = try await client.execute(uri: accepting, method: .get)
            let lineTwoTag = try #require(lineTwo.header("ETag"))
            for _ in 0..<3 {
                let again = try await client.execute(
                    uri: accepting, method: .get, headers: [.ifNoneMatch: lineTwoTag])
                #expect(again.status == .notModified)
            }
            try store.publish("trips.v3", rows: 21)  // not byte for byte line 2's file (its ETag would match)
            var moved = try await client.execute(uri: accepting, method: .get, headers: [.ifNoneMatch: lineTwoTag])
            let publishedAt = ContinuousClock.now
            while moved.status == .notModified, ContinuousClock.now - publishedAt < .seconds(20) {
                try await Task.sleep(for: .milliseconds(50))
                moved = try await client.execute(uri: accepting, method: .get, headers: [.ifNoneMatch: lineTwoTag])
            }
            #expect(moved.status == .ok && (try? Manifest.decode(moved.bodyData).dataset) == "trips.v3")

            // Retiring line 1: its URLs and the clients that accept only it get 410, code gone.
            try store.store.retire(line: "trips.v1", at: Timestamp.format(Date()))
            var gone = try await client.execute(uri: "/v1/datasets/trips.v1/manifest", method: .get)
            let deadline = ContinuousClock.now + .seconds(20)
            while gone.status != .gone, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
                gone = try await client.execute(uri: "/v1/datasets/trips.v1/manifest", method: .get)
            }
            #expect(gone.status == .gone)
            #expect(gone.bodyString.contains(#""code":"gone""#) && gone.bodyString.contains("lines served: 2, 3"))
            #expect(gone.bodyString.contains("schema line 1 of dataset 'trips' is retired"))
            let revalidatedGone = try await client.execute(
                uri: "/v1/datasets/trips.v1/manifest", method: .get, headers: [.ifNoneMatch: etag])
            #expect(revalidatedGone.status == .gone)
            #expect(
                try await client.execute(uri: "/v1/datasets/trips.v1/versions/2", method: .get).status == .gone)
            #expect(try await manifest("/v1/datasets/trips/manifest?schema=1").0 == .gone)
            #expect(try await manifest("/v1/datasets/trips/manifest?schema=1,2") == (.ok, "trips.v2"))
            #expect(try await manifest("/v1/datasets/trips/manifest") == (.ok, "trips.v3"))
            // The listing names the live lines only.
            let list = try await client.execute(uri: "/v1/datasets", method: .get)
            #expect(list.bodyString.contains(#""dataset":"trips.v2""#))
            #expect(!list.bodyString.contains(#""dataset":"trips.v1""#))

            // The status page: per line, the distinct devices seen, and whether it is retired.
            let status = try await client.execute(
                uri: "/status.json", method: .get, headers: [.authorization: "Bearer status-secret"])
            let report = try JSONDecoder().decode(StatusReport.self, from: status.bodyData)
            let lines = Dictionary(uniqueKeysWithValues: report.datasets.map { ($0.name, $0) })
            #expect(lines["trips.v1"]?.devices24h == 2 && lines["trips.v1"]?.retired == true)
            #expect(lines["trips.v2"]?.devices24h == 1 && lines["trips.v2"]?.retired == false)
        }
    }

    @Test func theSameRequestHeadFollowsANewLineAndCountsItsDeviceEachTime() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish("trips.v1")
        let two = try store.publish("trips.v2")
        var configuration = store.configuration()
        configuration.statusToken = "status-secret"
        try await store.withLiveServer(configuration) { client in
            let port = try #require(client.port)
            // Byte for byte the same head each time: the channel's memo of request heads would answer it.
            let head = [("If-None-Match", "\"\(two.sha256)\""), ("Ferry-Device", "device-memo")]
            let path = "/v1/datasets/trips/manifest?schema=1,2,3"
            for _ in 0..<3 {
                #expect(try await RevalidationTests.exchange(port, "GET", path, head).status == 304)
            }
            try store.publish("trips.v3", rows: 21)
            var status = 304
            let deadline = ContinuousClock.now + .seconds(20)
            while status == 304, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
                status = try await RevalidationTests.exchange(port, "GET", path, head).status
            }
            #expect(status == 200)
            // A line's own URL is remembered, and each answer still counts its device.
            let own = "/v1/datasets/trips.v2/manifest"
            for _ in 0..<3 {
                #expect(try await RevalidationTests.exchange(port, "GET", own, head).status == 304)
            }
            let report = try await client.execute(
                uri: "/status.json", method: .get, headers: [.authorization: "Bearer status-secret"])
            let datasets = try JSONDecoder().decode(StatusReport.self, from: report.bodyData).datasets
            #expect(datasets.first { $0.name == "trips.v2" }?.devices24h == 1)
            #expect(datasets.first { $0.name == "trips.v3" }?.devices24h == 1)
        }
    }

    @Test func deviceSightingsKeepTwentyFourHoursAndABoundedNumber() {
        let sightings = DeviceSightings(limit: 10)
        let now = Date()
        for i in 0..<5 {
            sightings.record(
                [HTTPField.Name("Ferry-Device")!: "old-\(i)"], dataset: "d", now: now.addingTimeInterval(-90_000))
        }
        for i in 0..<25 {
            sightings.record([HTTPField.Name("Ferry-Device")!: "id-\(i)"], dataset: "d", now: now)
        }
        sightings.record([HTTPField.Name("Ferry-Device")!: "id-0"], dataset: "d", now: now)
        sightings.record([HTTPField.Name("Ferry-Device")!: "not valid!"], dataset: "d", now: now)
        sightings.record([:], dataset: "e", now: now)
        let counts = sightings.counts(now: now)
        #expect((1...10).contains(counts["d"] ?? 0))
        #expect(counts["e"] == nil)
    }
}
