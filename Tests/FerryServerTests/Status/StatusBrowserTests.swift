import FerryCore
import FerryPostgres
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The status page in a real browser: the real `ferry serve` with two published datasets (one scoped), the
/// changes endpoint, the token checks, a publish schedule and some traffic; then headless Chromium opens
/// `/status?token=…` as an operator's browser on the machine would.
@Suite("Status: the page in headless Chromium")
struct StatusBrowserTests {
    static let token = "browser-status-token-0123456789"
    /// Screenshots are kept here (under .build, so never committed) for a person to look at.
    static let screenshots = TestPaths.packageRoot.appendingPathComponent(".build/status-screenshots")

    @Test(
        "loads without console errors, draws every plot, shows the numbers of /status.json, and screenshots at 1280×800 and 390×844"
    )
    func pageInChromium() async throws {
        // Given a browser (missing is a failure that says how to install it, not a skip)
        let chromium = try HeadlessChromium.find()
        // And a database with the sample data, published with the real CLI: trips twice (two versions), the tiered one
        // once
        let database = try TestDatabase.create("status")
        defer { database.drop() }
        let pg = try database.connect()
        for file in ["trips.pg.sql", "campgrounds.pg.sql"] {
            try pg.execute(
                String(contentsOf: TestPaths.packageRoot.appendingPathComponent("templates/\(file)"), encoding: .utf8))
        }
        let store = try TemporaryDirectory("ferry-status-store")
        defer { store.remove() }
        let trips = TestPaths.packageRoot.appendingPathComponent("templates/trips.yml").path
        let tiered = TestPaths.packageRoot.appendingPathComponent("templates/campgrounds-tiered.yml").path
        func publish(_ template: String) async throws {
            let run = try await runFerry([
                "publish", "--config", template, "--store", store.url.path, "--database-url", database.url,
            ])
            #expect(run.status == 0, "\(run.stderr)")
        }
        try await publish(trips)
        try pg.execute("UPDATE trips SET bags = bags + 1, \"updatedAt\" = now() WHERE name = 'Kalmar-Öland'")
        try pg.execute("INSERT INTO trips (name) SELECT 'Trip ' || n FROM generate_series(1, 40) AS n")
        try await publish(trips)
        try await publish(tiered)

        // When ferry serve runs with both templates, a publish schedule (publishes once at start) and a status token
        let server = try await StatusServeProcess(arguments: [
            "serve", "--store", store.url.path, "--port", "0", "--config", trips, "--config", tiered,
            "--database-url", database.url,
            "--publish-every", "1h", "--status-token", Self.token,
        ])
        defer { server.stop() }
        let base = server.url

        // And it has seen traffic of every kind
        let snapshot = try await Self.request(base + "/v1/datasets/trips/snapshot")
        #expect(snapshot.status == 200)
        let etag = try #require(snapshot.headers["Etag"] ?? snapshot.headers["ETag"])
        #expect(
            try await Self.request(base + "/v1/datasets/trips/snapshot", headers: ["If-None-Match": etag]).status == 304
        )
        #expect(
            try await Self.request(base + "/v1/datasets/trips/snapshot", headers: ["Range": "bytes=0-99"]).status == 206
        )
        #expect(try await Self.request(base + "/v1/datasets/nope/manifest").status == 404)
        #expect(try await Self.request(base + "/v1/datasets/campgrounds-tiered/manifest").status == 401)
        let old = "2018-01-01T00:00:00.000Z"
        let now = Timestamp.format(Date())
        let tripChanges = ChangeBatch(
            clientId: "browser-test", sentAt: now,
            changes: [
                Change(
                    id: "a", table: "trips", op: .insert, key: ["id": .string(UUID().uuidString.lowercased())],
                    values: ["name": .string("Status-Trip"), "passengers": .int(1), "bags": .int(0)], editedAt: now,
                    baseUpdatedAt: nil),
                Change(
                    id: "r", table: "trips", op: .update, key: ["id": .string("7a1f6c1e-2d7b-4c55-9a7e-0c5d7e1b0001")],
                    values: ["passengers": .int(5)], editedAt: "2018-01-02T00:00:00.000Z", baseUpdatedAt: old),
                Change(
                    id: "g", table: "trips", op: .update, key: ["id": .string(UUID().uuidString.lowercased())],
                    values: ["passengers": .int(5)], editedAt: now, baseUpdatedAt: old),
                Change(
                    id: "i", table: "trips", op: .update, key: ["id": .string("7a1f6c1e-2d7b-4c55-9a7e-0c5d7e1b0002")],
                    values: ["passengers": .string("many")], editedAt: now, baseUpdatedAt: old),
            ])
        let uploaded = try await Self.request(
            base + "/v1/datasets/trips/changes", method: "POST", body: try JSONEncoder().encode(tripChanges))
        #expect(uploaded.status == 200)
        let statuses = try JSONDecoder().decode(ChangeResults.self, from: uploaded.body).results.map(\.status)
        #expect(statuses == [.applied, .rejected, .gone, .invalid])
        let tierChange = ChangeBatch(
            clientId: "browser-test", sentAt: now,
            changes: [
                Change(
                    id: "f", table: "campgrounds", op: .insert, key: ["id": .string(UUID().uuidString.lowercased())],
                    values: ["name": .string("Premium Peak"), "lat": .double(1), "lon": .double(2), "tier": .int(2)],
                    editedAt: now, baseUpdatedAt: nil)
            ])
        let forbidden = try await Self.request(
            base + "/v1/datasets/campgrounds-tiered/changes", method: "POST",
            headers: ["Authorization": "Bearer alice-token"],
            body: try JSONEncoder().encode(tierChange))
        #expect(forbidden.status == 200)
        #expect(
            try JSONDecoder().decode(ChangeResults.self, from: forbidden.body).results.map(\.status) == [.forbidden])
        // And both scheduled publishes have reported
        var report = try await Self.statusJSON(base)
        for _ in 0..<100 where Self.publishesReported(report) < 2 {
            try await Task.sleep(for: .milliseconds(200))
            report = try await Self.statusJSON(base)
        }
        #expect(
            Self.publishesReported(report) == 2,
            "the scheduled publishes did not reach the status page: \(server.output)")

        // Then Chromium loads the page (as a browser on this machine: ?token=) without a console message
        let pageURL = base + "/status?token=\(Self.token)"
        let control = try await chromium.dumpDOM("data:text/html,<script>console.error('ferry-control')</script>")
        #expect(
            control.consoleLines.contains { $0.contains("ferry-control") },
            "console messages are not detected in chromium's log: \(control.log.suffix(1500))")
        let page = try await chromium.dumpDOM(pageURL)
        #expect(page.consoleLines.isEmpty, "console messages while loading /status: \(page.consoleLines)")
        let dom = page.stdout
        #expect(dom.contains("<h1>Ferry status</h1>"), "\(dom.prefix(500))")
        #expect(!dom.contains(Self.token))

        // And every plot is drawn with a non-empty path
        let plots = Self.plots(in: dom)
        #expect(Set(plots.keys) == ["dataset-trips", "dataset-campgrounds-tiered", "requests", "bytes", "uploads"])
        for (name, paths) in plots {
            #expect(!paths.isEmpty && paths.allSatisfy { $0.hasPrefix("M") && $0.count > 4 }, "plot \(name): \(paths)")
        }
        // 200, 206, 304 and 4xx (the 404 and the 401) have bars; 5xx and other none
        #expect(plots["requests"]?.count == 4)
        #expect(plots["uploads"]?.count == 5)  // applied, rejected, gone, invalid, forbidden

        // And every number marked on the page equals the JSON fetched right after
        let json = try await Self.request(base + "/status.json", headers: ["Authorization": "Bearer \(Self.token)"])
        let tree = try JSONDecoder().decode(JSONTree.self, from: json.body)
        let fields = Self.fields(in: dom)
        #expect(fields.count > 60)
        for expected in [
            "datasets.0.size", "datasets.1.retained.1.rows", "datasets.0.scopes.largest.size",
            "traffic.totals.forbidden",
            "traffic.totals.bytes", "health.datasets.0.lastPublish.outcome", "health.lastPollAt",
        ] {
            #expect(fields.contains { $0.path == expected }, "no data-field \(expected)")
        }
        for field in fields {
            let value = Self.value(at: field.path, in: tree)
            switch field.path {
            case "generatedAt", "health.lastPollAt":  // moves with every poll and request
                #expect(value.map { Timestamp.parse($0) != nil } == true, "\(field.path)")
            case let path where path.hasSuffix("ageSeconds"):
                #expect(abs((Int(field.value) ?? -100) - (value.flatMap { Int($0) } ?? 100)) <= 5, "\(path)")
            default:
                #expect(field.value == value, "\(field.path): page \(field.value), json \(value ?? "missing")")
            }
        }
        // And the text a person reads next to each number says the same as the JSON (to the precision shown)
        let texts = Self.visibleFields(in: dom)
        #expect(texts.count == fields.count, "every data-field has its visible text")
        for field in texts {
            let moving =
                ["generatedAt", "health.lastPollAt"].contains(field.path) || field.path.hasSuffix("ageSeconds")
            // Values that move between the page and the JSON are read against the page's own data-value
            guard let value = moving ? field.value : Self.value(at: field.path, in: tree) else {
                Issue.record("\(field.path) is not in /status.json")
                continue
            }
            #expect(
                Self.reads(field.text, as: value, path: field.path),
                "\(field.path): the page reads '\(field.text)', the JSON has \(value)")
        }
        #expect(Self.value(at: "traffic.totals.applied", in: tree) == "1")
        #expect(Self.value(at: "datasets.0.name", in: tree) == "campgrounds-tiered")

        // And it screenshots at a desktop's and a phone's size (look at them: .build/status-screenshots/)
        try FileManager.default.createDirectory(at: Self.screenshots, withIntermediateDirectories: true)
        try Data(dom.utf8).write(to: Self.screenshots.appendingPathComponent("status.html"))
        for (width, height) in [(1280, 800), (390, 844)] {
            let png = Self.screenshots.appendingPathComponent("status-\(width)x\(height).png")
            let shot = try await chromium.screenshot(pageURL, width: width, height: height, to: png)
            #expect(shot.consoleLines.isEmpty, "\(shot.consoleLines)")
            let bytes = try Data(contentsOf: png)
            #expect(
                bytes.starts(with: [0x89, 0x50, 0x4E, 0x47]) && bytes.count > 10_000,
                "\(png.path): \(bytes.count) bytes")
        }
        // And at a phone's and a desktop's size nothing is wider than the viewport (no sideways scrolling of the page;
        // wide tables scroll inside their own box), measured by Chromium's layout through the DevTools pipe
        let sizes = [(390, 844), (1280, 800)]
        let layouts = try await chromium.layout(pageURL, sizes: sizes)
        #expect(layouts.map(\.width) == sizes.map(\.0))
        for layout in layouts {
            #expect(layout.clientWidth == layout.width, "\(layout)")
            #expect(
                layout.scrollWidth <= layout.width && layout.overflowing.isEmpty,
                "page overflows at \(layout.width)×\(layout.height): \(layout)")
        }
        #expect(!server.output.contains(Self.token), "the status token appeared in the server's output")
    }

    @Test("the layout measurement sees a page wider than a phone's viewport")
    func layoutMeasurementDetectsOverflow() async throws {
        // Given a page with a 600 px wide block (the check above must be able to fail)
        let chromium = try HeadlessChromium.find()
        let directory = try TemporaryDirectory("ferry-layout")
        defer { directory.remove() }
        let page = directory.url.appendingPathComponent("wide.html")
        try Data(
            #"<!doctype html><meta name="viewport" content="width=device-width, initial-scale=1"><div style="width:600px">wide</div>"#
                .utf8
        )
        .write(to: page)
        // When it is measured at 390 px, then it overflows; at 1280 px it does not
        let layouts = try await chromium.layout(page.absoluteString, sizes: [(390, 844), (1280, 800)])
        #expect(layouts.count == 2)
        #expect(layouts.first.map { $0.scrollWidth > 390 && !$0.overflowing.isEmpty } == true, "\(layouts)")
        #expect(layouts.last.map { $0.scrollWidth <= 1280 && $0.overflowing.isEmpty } == true, "\(layouts)")
    }

    // MARK: Helpers

    static func publishesReported(_ report: [String: Any]) -> Int {
        let health = (report["health"] as? [String: Any])?["datasets"] as? [[String: Any]] ?? []
        return health.filter { ($0["lastPublish"] as? [String: Any])?["outcome"] as? String == "unchanged" }.count
    }

    static func statusJSON(_ base: String) async throws -> [String: Any] {
        let response = try await request(base + "/status.json", headers: ["Authorization": "Bearer \(token)"])
        guard response.status == 200,
            let object = try JSONSerialization.jsonObject(with: response.body) as? [String: Any]
        else {
            throw FerryError(.network, "/status.json answered \(response.status)")
        }
        return object
    }

    struct Answer: Sendable {
        let status: Int
        let headers: [String: String]
        let body: Data
    }

    static func request(_ url: String, method: String = "GET", headers: [String: String] = [:], body: Data? = nil)
        async throws -> Answer
    {
        var request = URLRequest(url: URL(string: url)!, timeoutInterval: 30)
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let body {
            request.httpBody = body
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let configuration = URLSessionConfiguration.ephemeral
        configuration.requestCachePolicy = .reloadIgnoringLocalAndRemoteCacheData
        configuration.urlCache = nil
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let (data, response) = try await session.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        var fields: [String: String] = [:]
        for (name, value) in http.allHeaderFields { fields["\(name)"] = "\(value)" }
        return Answer(status: http.statusCode, headers: fields, body: data)
    }

    /// Each `<svg … data-plot="name">`'s series paths (`<path class="series" … d="…">`), from Chromium's DOM.
    static func plots(in dom: String) -> [String: [String]] {
        var plots: [String: [String]] = [:]
        let svg = try! NSRegularExpression(
            pattern: #"<svg[^>]*\sdata-plot="([^"]+)"[^>]*>(.*?)</svg>"#, options: [.dotMatchesLineSeparators])
        let path = try! NSRegularExpression(pattern: #"<path[^>]*\sclass="series"[^>]*\sd="([^"]*)""#)
        for match in svg.matches(in: dom, range: NSRange(dom.startIndex..., in: dom)) {
            let name = String(dom[Range(match.range(at: 1), in: dom)!])
            let inner = String(dom[Range(match.range(at: 2), in: dom)!])
            plots[name] = path.matches(in: inner, range: NSRange(inner.startIndex..., in: inner)).map {
                String(inner[Range($0.range(at: 1), in: inner)!])
            }
        }
        return plots
    }

    /// Every `<span data-field="path" data-value="value">text</span>` on the page, with its visible text.
    static func visibleFields(in dom: String) -> [(path: String, value: String, text: String)] {
        let field = try! NSRegularExpression(
            pattern: #"<span data-field="([^"]+)" data-value="([^"]*)">([^<]*)</span>"#)
        return field.matches(in: dom, range: NSRange(dom.startIndex..., in: dom)).map {
            (
                unescape(String(dom[Range($0.range(at: 1), in: dom)!])),
                unescape(String(dom[Range($0.range(at: 2), in: dom)!])),
                unescape(String(dom[Range($0.range(at: 3), in: dom)!]))
            )
        }
    }

    /// Whether `text`, as a person reads it, states `value` (a JSON scalar as ``value(at:in:)`` prints it): read back
    /// independently of the page's formatter, to the precision the text shows. Byte sizes (`512 B`, `48.0 KiB`), counts
    /// with thin-space groups, `v3`, `12 rows`, `4 current`, durations (`5 min`, `3 h 12 min`), times
    /// (`2026-03-01 12:03:04 UTC`, `03-01 12:03`), yes/no, and text as is.
    static func reads(_ text: String, as value: String, path: String) -> Bool {
        if text == value { return true }
        if value == "true" || value == "false" { return text == (value == "true" ? "yes" : "no") }
        if Timestamp.parse(value) != nil {
            let utc = value.replacingOccurrences(of: "T", with: " ")
            return text == String(utc.prefix(19)) + " UTC" || text == String(utc.dropFirst(5).prefix(11))
        }
        guard let number = Int64(value) else { return false }
        let words = text.split(separator: " ").map(String.init)
        func integer(_ word: String) -> Int64? { Int64(word.replacingOccurrences(of: "\u{202F}", with: "")) }
        if let read = integer(text) { return read == number }
        if text.hasPrefix("v"), let read = Int64(text.dropFirst()) { return read == number }
        if words.count == 2,
            ["rows", "current", "steps", "hits", "misses", "running", "waiting", "every", "5m", "1h", "1d"].contains(
                words[1]), let read = integer(words[0])
        {
            return read == number
        }
        if path.hasSuffix("ageSeconds") || path.hasSuffix("horizonSeconds") {
            // Whole units shown, the rest cut off; the JSON may be a few seconds older than the page
            let units: [String: Int64] = ["s": 1, "min": 60, "h": 3600, "d": 86_400]
            var seconds: Int64 = 0
            var smallest: Int64 = 1
            var index = 0
            while index + 1 < words.count {
                guard let amount = Int64(words[index]), let unit = units[words[index + 1]] else { return false }
                seconds += amount * unit
                smallest = unit
                index += 2
            }
            return index == words.count && number >= seconds - 5 && number < seconds + smallest + 5
        }
        if words.count == 2 {
            let units: [String: Double] = [
                "B": 1, "KiB": 1024, "MiB": 1_048_576, "GiB": 1_073_741_824, "TiB": 1_099_511_627_776,
            ]
            guard let unit = units[words[1]], let amount = Double(words[0]) else { return false }
            if unit == 1 { return Int64(words[0]) == number }
            // One decimal shown: the exact value is within half a tenth of the unit
            return abs(amount * unit - Double(number)) <= 0.05 * unit + 0.5
        }
        return false
    }

    /// Every `data-field="path" data-value="value"` pair on the page.
    static func fields(in dom: String) -> [(path: String, value: String)] {
        let field = try! NSRegularExpression(pattern: #"data-field="([^"]+)" data-value="([^"]*)""#)
        return field.matches(in: dom, range: NSRange(dom.startIndex..., in: dom)).map {
            (
                unescape(String(dom[Range($0.range(at: 1), in: dom)!])),
                unescape(String(dom[Range($0.range(at: 2), in: dom)!]))
            )
        }
    }

    static func unescape(_ text: String) -> String {
        text.replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&#39;", with: "'")
            .replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
            .replacingOccurrences(of: "&nbsp;", with: "\u{00A0}").replacingOccurrences(of: "&amp;", with: "&")
    }

    /// The JSON value at a dotted path (`datasets.0.size`) as the page would print it; nil when absent.
    static func value(at path: String, in tree: JSONTree) -> String? {
        var node = tree
        for key in path.split(separator: ".") {
            switch node {
            case .array(let array):
                guard let index = Int(key), array.indices.contains(index) else { return nil }
                node = array[index]
            case .object(let object):
                guard let next = object[String(key)] else { return nil }
                node = next
            default:
                return nil
            }
        }
        switch node {
        case .bool(let value): return value ? "true" : "false"
        case .int(let value): return String(value)
        case .double(let value): return String(value)
        case .string(let value): return value
        default: return nil
        }
    }
}
