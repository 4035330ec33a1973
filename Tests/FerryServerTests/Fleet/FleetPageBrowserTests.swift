import FerryCore
import Foundation
import Testing

@testable import FerryServer

/// The devices table of the status page (`/status/devices`) in headless Chromium, with a fleet of 1,000 devices:
/// every row is there, nothing is refused by the Content-Security-Policy, and a column header's link sorts it.
@Suite("Fleet: the devices table in headless Chromium")
struct FleetPageBrowserTests {
    @Test("1,000 devices load, and sort by device through the header's link")
    func thousandDevices() async throws {
        let chromium = try HeadlessChromium.find()
        try await FleetWorld.with("fleet-page") { world in
            let alice = try await world.sync("alice")
            // 999 more devices in the fleet, as a server that saw them would have written them
            try await world.sql(
                """
                INSERT INTO ferry_devices(dataset, device, first_seen, last_seen, held_version, held_how, held_at, scope, client)
                SELECT 'campgrounds-tiered', 'device-' || lpad(n::text, 4, '0'), now() - interval '3 days',
                       now() - (n || ' minutes')::interval, 1, 'full', now(), '0', 'ferry-swift/0.1.0'
                FROM generate_series(1, 999) AS n
                """)
            let token = FleetWorld.statusToken
            let started = ContinuousClock.now
            let served = try await world.get("/status/devices?token=\(token)")
            let serveTime = ContinuousClock.now - started
            #expect(served.status == 200)
            print("fleet page: 1,000 devices served in \(serveTime), \(served.body.count) bytes")

            let page = try await chromium.dumpDOM(world.server + "/status/devices?token=\(token)")
            #expect(page.consoleLines.isEmpty, "\(page.consoleLines)")
            let rows = Self.devices(in: page.stdout)
            #expect(rows.count == 1_000)
            #expect(rows.first == alice)  // most recently seen first

            // The Device header links to the page sorted by device, ascending
            let link = try #require(Self.sortLink("device", in: page.stdout))
            let sorted = try await chromium.dumpDOM(world.server + link)
            let byDevice = Self.devices(in: sorted.stdout)
            #expect(byDevice.count == 1_000)
            #expect(byDevice == byDevice.sorted())
            #expect(byDevice.first == min(alice, "device-0001"))

            // How long the browser takes to get the 1,000-row page to DOMContentLoaded, printed for the record
            // (performance is measured, not asserted: scripts/bench and the closing notes carry the figure)
            let layout = try await chromium.layout(
                world.server + "/status/devices?token=\(token)", sizes: [(1280, 800)])
            #expect(layout.count == 1)
            print(
                "fleet page: 1,000 devices to DOMContentLoaded in Chromium: \(layout.first?.domContentLoadedMs ?? -1) ms"
            )
        }
    }

    /// The `data-device` of each row, in order.
    static func devices(in html: String) -> [String] {
        html.components(separatedBy: "data-device=\"").dropFirst().compactMap { $0.split(separator: "\"").first }
            .map(String.init)
    }

    /// The href of the header link that sorts by `column` (HTML-unescaped).
    static func sortLink(_ column: String, in html: String) -> String? {
        guard let marker = html.range(of: "data-sort=\"\(column)\"") else { return nil }
        let before = html[..<marker.lowerBound]
        guard let href = before.range(of: "href=\"", options: .backwards) else { return nil }
        let value = before[href.upperBound...].prefix { $0 != "\"" }
        return value.replacingOccurrences(of: "&amp;", with: "&")
    }
}
