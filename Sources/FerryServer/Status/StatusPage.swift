import Foundation

/// Renders a ``StatusReport`` as one self-contained HTML page: inline CSS and SVG, no script, nothing loaded from
/// elsewhere. Every number shown carries `data-field` (its path in `/status.json`, e.g. `datasets.0.size`) and
/// `data-value` (the exact value), so a test can check the page against the JSON.
///
/// Reads at 1280×800 and on a 390×844 phone (media queries stack the cards and plots), and without colour: series
/// are told apart by pattern, dash and marker, and named in text.
enum StatusPage {
    static func render(_ report: StatusReport) -> String {
        var html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>Ferry status</title><link rel="icon" href="data:,">
            <style>\(css)</style></head>
            <body>
            """
        html += StatusPlot.patternDefinitions
        html +=
            "<header><h1>Ferry status</h1><p>Generated \(field("generatedAt", report.generatedAt, StatusFormat.time(report.generatedAt)))"
        html += " · server up since \(field("startedAt", report.startedAt, StatusFormat.time(report.startedAt)))"
        html += " · store \(field("store", report.store, report.store))"
        html += #" · <a href="status.json">status.json</a>"#
        // With a database the server keeps the fleet (docs/operations.md): its devices table.
        if report.health.datasets.contains(where: \.merger) { html += #" · <a href="status/devices">devices</a>"# }
        html += " (same token)</p></header><main>"
        html += health(report.health)
        html += #"<section id="datasets"><h2>Datasets</h2>"#
        if report.datasets.isEmpty { html += "<p>No dataset is published in the store yet.</p>" }
        html += #"<div class="cards">"#
        for (index, dataset) in report.datasets.enumerated() { html += card(dataset, index: index) }
        html += "</div></section>"
        html += traffic(report.traffic)
        return html + "</main></body></html>\n"
    }

    // MARK: Health

    static func health(_ health: StatusReport.Health) -> String {
        var html = #"<section id="health"><h2>Health</h2><p>The catalog last read the store at "#
        html += health.lastPollAt.map { field("health.lastPollAt", $0, StatusFormat.time($0)) } ?? "— (not yet)"
        html += ". Unreadable manifests: "
        if health.unreadableManifests.isEmpty {
            html += "none."
        } else {
            html += #"<strong class="bad">⚠ \#(health.unreadableManifests.count) unreadable</strong>: "#
            html += health.unreadableManifests.enumerated().map { index, name in
                field("health.unreadableManifests.\(index)", name, name)
            }.joined(separator: ", ")
            html += " (the previous version is still served; see the server log)."
        }
        html += "</p>"
        guard !health.datasets.isEmpty else { return html + "</section>" }
        html +=
            #"<div class="scroll"><table class="health"><thead><tr><th scope="col">Dataset</th><th scope="col">Uploads merged</th>"#
        html +=
            #"<th scope="col">Token check</th><th scope="col">Last in-process publish</th><th scope="col">Last upload</th></tr></thead><tbody>"#
        for (index, dataset) in health.datasets.enumerated() {
            let path = "health.datasets.\(index)"
            html += "<tr><th scope=\"row\">\(field("\(path).name", dataset.name, dataset.name))</th>"
            html +=
                "<td data-label=\"Uploads merged\">\(field("\(path).merger", dataset.merger, dataset.merger ? "yes" : "no"))"
            html += connection(dataset.mergerConnection, path: "\(path).mergerConnection") + "</td>"
            html +=
                "<td data-label=\"Token check\">\(field("\(path).tokenCheck", dataset.tokenCheck, dataset.tokenCheck ? "yes" : "no"))"
            html += connection(dataset.tokenCheckConnection, path: "\(path).tokenCheckConnection") + "</td>"
            html += "<td data-label=\"Last publish\">"
            if let publish = dataset.lastPublish {
                let good = publish.outcome != "failed"
                html +=
                    "<span class=\"\(good ? "good" : "bad")\">\(good ? "✓" : "✗") \(field("\(path).lastPublish.outcome", publish.outcome, publish.outcome))</span>"
                if let version = publish.version {
                    html += " v\(field("\(path).lastPublish.version", version, String(version)))"
                }
                html += " at \(field("\(path).lastPublish.at", publish.at, StatusFormat.time(publish.at)))"
                if let message = publish.message { html += "<br><small>\(StatusFormat.escape(message))</small>" }
            } else {
                html += "—"
            }
            html += "</td><td data-label=\"Last upload\">"
            if let upload = dataset.lastUpload {
                html +=
                    "<span class=\"\(upload.succeeded ? "good" : "bad")\">\(upload.succeeded ? "✓ merged" : "✗ database failed")</span>"
                html += " at \(field("\(path).lastUpload.at", upload.at, StatusFormat.time(upload.at)))"
            } else {
                html += "—"
            }
            html += "</td></tr>"
        }
        return html + "</tbody></table></div></section>"
    }

    /// A merger's or token check's PostgreSQL connection state, under its yes/no: marked by a symbol and a word, not
    /// only by colour.
    static func connection(_ connection: StatusReport.Connection?, path: String) -> String {
        guard let connection else { return "" }
        var html = "<br><small>PostgreSQL: "
        switch connection.state {
        case "connected":
            html += "<span class=\"good\">✓ \(field("\(path).state", connection.state, "connected"))</span>"
        case "failing": html += "<span class=\"bad\">✗ \(field("\(path).state", connection.state, "failing"))</span>"
        default: html += field("\(path).state", connection.state, connection.state) + " (not used yet)"
        }
        if let at = connection.lastSuccessAt {
            html += ", last answer \(field("\(path).lastSuccessAt", at, StatusFormat.time(at)))"
        }
        if let at = connection.lastFailureAt {
            html += ", last failure \(field("\(path).lastFailureAt", at, StatusFormat.time(at)))"
        }
        if let error = connection.lastError { html += ": \(field("\(path).lastError", error, error))" }
        return html + "</small>"
    }

    // MARK: Datasets

    static func card(_ dataset: StatusReport.Dataset, index: Int) -> String {
        let path = "datasets.\(index)"
        let name = StatusFormat.escape(dataset.name)
        var html = #"<article class="card" id="dataset-\#(name)"><h3>\#(name)"#
        if dataset.scoped { html += #" <span class="tag">scoped</span>"# }
        if dataset.retired { html += #" <span class="tag">retired: answered 410</span>"# }
        html += #"</h3><dl class="numbers">"#
        html += numbers(dataset, path: path)
        html += "</dl>"
        if dataset.scoped {
            html +=
                "<p class=\"note\">Sums over every scope's current snapshot; versions show the dataset as of each number.</p>"
        }
        html += "<figure>"
        html += StatusPlot.versions(
            name: "dataset-\(dataset.name)", title: "\(dataset.name): snapshot size and rows over retained versions",
            versions: dataset.retained)
        let patched = dataset.retained.contains { !$0.patches.isEmpty }
        html += "<figcaption>Size (solid line, round markers)"
        if patched { html += ", patch from the previous version (dotted line, triangle markers, same scale)" }
        html +=
            " and rows (dashed line, square markers) per retained version, publish times in UTC.</figcaption></figure>"
        html += retainedTable(dataset, path: path)
        html +=
            #"<div class="scroll"><table><caption>Rows per table (current)</caption><thead><tr><th scope="col">Table</th><th scope="col" class="num">Rows</th></tr></thead><tbody>"#
        for table in dataset.tables.keys.sorted() {
            let rows = dataset.tables[table] ?? 0
            html +=
                "<tr><td>\(StatusFormat.escape(table))</td><td class=\"num\">\(field("\(path).tables.\(table)", rows, StatusFormat.count(rows)))</td></tr>"
        }
        return html + "</tbody></table></div></article>"
    }

    /// The items of a dataset card's numbers: version, devices, age, sizes, rows, the newest patch and the scopes.
    static func numbers(_ dataset: StatusReport.Dataset, path: String) -> String {
        var html = item("Version", field("\(path).version", dataset.version, "v\(dataset.version)"))
        html += item(
            "Devices", field("\(path).devices24h", dataset.devices24h, StatusFormat.count(dataset.devices24h)),
            note: "seen in the last 24 h")
        html += item(
            "Age", field("\(path).ageSeconds", dataset.ageSeconds, StatusFormat.duration(seconds: dataset.ageSeconds)),
            note: field("\(path).createdAt", dataset.createdAt, StatusFormat.time(dataset.createdAt)))
        html += item("Size", field("\(path).size", dataset.size, StatusFormat.bytes(dataset.size)))
        html += item("Gzip", field("\(path).gzipSize", dataset.gzipSize, StatusFormat.bytes(dataset.gzipSize)))
        html += item("Rows", field("\(path).rows", dataset.rows, StatusFormat.count(dataset.rows)))
        if let last = dataset.retained.indices.last, let previous = dataset.retained.dropLast().last,
            let index = dataset.retained[last].patches.firstIndex(where: { $0.from == previous.version })
        {
            let patch = dataset.retained[last].patches[index]
            html += item(
                "Patch",
                field("\(path).retained.\(last).patches.\(index).size", patch.size, StatusFormat.bytes(patch.size)),
                note: "from " + field("\(path).retained.\(last).patches.\(index).from", patch.from, "v\(patch.from)"))
        }
        if let history = dataset.history {
            html += item(
                "Catch-up from",
                field("\(path).history.oldestVersion", history.oldestVersion, "v\(history.oldestVersion)"),
                note: "horizon "
                    + field(
                        "\(path).history.horizonSeconds", history.horizonSeconds,
                        StatusFormat.duration(seconds: history.horizonSeconds)))
            html += item(
                "History", field("\(path).history.bytes", history.bytes, StatusFormat.bytes(history.bytes)),
                note: field("\(path).history.steps", history.steps, "\(StatusFormat.count(history.steps)) steps"))
            if !history.tiers.isEmpty {
                let tiers = history.tiers.enumerated().map { index, tier in
                    field("\(path).history.tiers.\(index).points", tier.points, "\(tier.points) \(tier.name)")
                }
                html += item("Tiers", tiers.joined(separator: " · "))
            }
        }
        if let builds = dataset.builds {
            html += item(
                "Build cache",
                field("\(path).builds.cacheBytes", builds.cacheBytes, StatusFormat.bytes(builds.cacheBytes)),
                note: field("\(path).builds.hits", builds.hits, "\(StatusFormat.count(builds.hits)) hits") + ", "
                    + field("\(path).builds.misses", builds.misses, "\(StatusFormat.count(builds.misses)) misses"))
            html += item(
                "Merges",
                field("\(path).builds.mergesRunning", builds.mergesRunning, "\(builds.mergesRunning) running"),
                note: field("\(path).builds.mergesWaiting", builds.mergesWaiting, "\(builds.mergesWaiting) waiting"))
        }
        if let attachments = dataset.attachments {
            html += item(
                "Attachments",
                field("\(path).attachments.bytes", attachments.bytes, StatusFormat.bytes(attachments.bytes)),
                note: field(
                    "\(path).attachments.count", attachments.count, "\(StatusFormat.count(attachments.count)) files"))
        }
        if let scopes = dataset.scopes {
            html += item("Scopes", field("\(path).scopes.count", scopes.count, StatusFormat.count(scopes.count)))
            html += item(
                "Distinct files",
                field("\(path).scopes.distinctFiles", scopes.distinctFiles, StatusFormat.count(scopes.distinctFiles)),
                note: field(
                    "\(path).scopes.distinctCurrentFiles", scopes.distinctCurrentFiles,
                    "\(scopes.distinctCurrentFiles) current"))
            html += item(
                "Largest scope",
                field("\(path).scopes.largest.size", scopes.largest.size, StatusFormat.bytes(scopes.largest.size)),
                note: field(
                    "\(path).scopes.largest.rows", scopes.largest.rows,
                    "\(StatusFormat.count(scopes.largest.rows)) rows"))
        }
        return html
    }

    /// The table of a dataset's retained versions, newest first, with their patches.
    static func retainedTable(_ dataset: StatusReport.Dataset, path: String) -> String {
        var html =
            #"<div class="scroll"><table><caption>Retained versions</caption><thead><tr><th scope="col">Version</th><th scope="col">Published (UTC)</th>"#
        html +=
            #"<th scope="col" class="num">Size</th><th scope="col" class="num">Gzip</th><th scope="col" class="num">Patches</th>"#
        html += #"<th scope="col" class="num">Rows</th></tr></thead><tbody>"#
        for (number, version) in dataset.retained.enumerated().reversed() {
            let row = "\(path).retained.\(number)"
            html += "<tr><td>\(field("\(row).version", version.version, "v\(version.version)"))</td>"
            html +=
                "<td>\(field("\(row).createdAt", version.createdAt, StatusFormat.shortTime(version.createdAt)))</td>"
            html += "<td class=\"num\">\(field("\(row).size", version.size, StatusFormat.bytes(version.size)))</td>"
            html +=
                "<td class=\"num\">\(field("\(row).gzipSize", version.gzipSize, StatusFormat.bytes(version.gzipSize)))</td>"
            html += "<td class=\"num\">"
            html += version.patches.enumerated().reversed().map { index, patch in
                field("\(row).patches.\(index).size", patch.size, StatusFormat.bytes(patch.size)) + " from "
                    + field("\(row).patches.\(index).from", patch.from, "v\(patch.from)")
            }.joined(separator: "<br>")
            html += version.patches.isEmpty ? "—</td>" : "</td>"
            html +=
                "<td class=\"num\">\(field("\(row).rows", version.rows, StatusFormat.count(version.rows)))</td></tr>"
        }
        return html + "</tbody></table></div>"
    }

    static func item(_ term: String, _ value: String, note: String? = nil) -> String {
        "<div><dt>\(term)</dt><dd>\(value)\(note.map { "<small>\($0)</small>" } ?? "")</dd></div>"
    }

    // MARK: Traffic

    /// A legend entry and its series: label, style (pattern), the count's key in ``StatusReport/Counts``.
    typealias Entry = (label: String, style: Int, key: String, value: @Sendable (StatusReport.Counts) -> Double)

    static let requestSeries: [Entry] = [
        ("200 OK", 0, "ok", { Double($0.ok) }),
        ("206 Partial", 1, "partial", { Double($0.partial) }),
        ("304 Not Modified", 2, "notModified", { Double($0.notModified) }),
        ("4xx", 3, "clientError", { Double($0.clientError) }),
        ("5xx", 4, "serverError", { Double($0.serverError) }),
        ("other", 5, "other", { Double($0.other) }),
    ]

    static let uploadSeries: [Entry] = [
        ("applied", 0, "applied", { Double($0.applied) }),
        ("rejected by rule", 1, "rejected", { Double($0.rejected) }),
        ("gone", 2, "gone", { Double($0.gone) }),
        ("invalid", 3, "invalid", { Double($0.invalid) }),
        ("forbidden", 4, "forbidden", { Double($0.forbidden) }),
    ]

    static func traffic(_ traffic: StatusReport.Traffic) -> String {
        let count = traffic.minutes.count
        let ticks =
            count == 0 ? [] : [(0, "−\(count) min"), (count / 2, "−\(count - count / 2) min"), (count - 1, "now")]
        var html =
            #"<section id="traffic"><h2>Traffic, last hour</h2><p class="note">One bar per minute, the newest on the right. "#
        html += "Requests to the status page itself are not counted.</p><div class=\"plots\">"
        html += figure(
            name: "requests", title: "Requests by answer", entries: requestSeries, traffic: traffic, ticks: ticks,
            format: { StatusFormat.count(Int($0)) })
        html += figure(
            name: "bytes", title: "Bytes sent", entries: [("body bytes", 0, "bytes", { Double($0.bytes) })],
            traffic: traffic,
            ticks: ticks, format: { StatusFormat.bytes(Int64($0)) })
        html += figure(
            name: "uploads", title: "Uploaded changes by decision", entries: uploadSeries, traffic: traffic,
            ticks: ticks,
            format: { StatusFormat.count(Int($0)) })
        return html + "</div></section>"
    }

    static func figure(
        name: String, title: String, entries: [Entry], traffic: StatusReport.Traffic, ticks: [(Int, String)],
        format: @escaping (Double) -> String
    ) -> String {
        let series = entries.map { entry in
            StatusPlot.Series(
                label: entry.label, style: entry.style, values: traffic.minutes.map { entry.value($0.counts) })
        }
        var html = "<figure class=\"traffic\"><figcaption><strong>\(title)</strong></figcaption>"
        html += StatusPlot.stackedBars(
            name: name, title: "\(title), per minute, last hour", series: series, tickLabels: ticks, format: format)
        html += "<ul class=\"legend\">"
        for entry in entries {
            let total = entry.value(traffic.totals)
            html += "<li>\(StatusPlot.swatch(entry.style)) \(StatusFormat.escape(entry.label)): "
            html += "<b>\(field("traffic.totals.\(entry.key)", Int64(total), format(total)))</b></li>"
        }
        return html + "</ul></figure>"
    }

    // MARK: Markup helpers

    /// `<span data-field="path" data-value="value">text</span>`; `text` is escaped.
    static func field(_ path: String, _ value: some CustomStringConvertible, _ text: String) -> String {
        "<span data-field=\"\(StatusFormat.escape(path))\" data-value=\"\(StatusFormat.escape(value.description))\">\(StatusFormat.escape(text))</span>"
    }

    static let css = """
        :root{--ink:#1b1f24;--muted:#59636e;--line:#d0d7de;--card:#f6f8fa;--good:#1a7f37;--bad:#b42318}
        *{box-sizing:border-box}
        body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--ink);background:#fff}
        header,main{max-width:1240px;margin:0 auto;padding:0 20px}
        header{padding-top:14px;border-bottom:1px solid var(--line)}
        h1{font-size:1.5rem;margin:0 0 4px}h2{font-size:1.2rem;margin:22px 0 8px}h3{font-size:1.1rem;margin:0 0 8px}
        header p,.note,small,caption{color:var(--muted)}small{display:block;font-size:.8rem}
        .cards{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:16px}
        .card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px;min-width:0}
        .tag{font-size:.75rem;font-weight:600;border:1px solid var(--ink);border-radius:10px;padding:1px 7px;vertical-align:middle}
        .numbers{display:grid;grid-template-columns:repeat(auto-fill,minmax(110px,1fr));gap:6px 12px;margin:0 0 8px}
        .numbers dt{font-size:.78rem;color:var(--muted);text-transform:uppercase;letter-spacing:.03em}
        .numbers dd{margin:0;font-size:1.15rem;font-weight:600;font-variant-numeric:tabular-nums}
        figure{margin:8px 0}figcaption{font-size:.82rem;color:var(--muted)}
        svg.plot{width:100%;height:auto;display:block;background:#fff;border:1px solid var(--line);border-radius:4px}
        svg.plot text{font-size:12px;fill:#333;font-family:inherit}
        .plots{display:grid;grid-template-columns:repeat(3,minmax(0,1fr));gap:16px}
        .traffic figcaption{color:var(--ink);margin-bottom:4px}
        .legend{list-style:none;padding:0;margin:6px 0 0;display:flex;flex-wrap:wrap;gap:4px 14px;font-size:.85rem}
        .legend li{display:flex;align-items:center;gap:5px}.swatch{width:14px;height:14px;flex:none}
        table{border-collapse:collapse;width:100%;margin:8px 0;font-size:.88rem;font-variant-numeric:tabular-nums}
        caption{text-align:left;font-size:.82rem;padding-bottom:2px}
        th,td{text-align:left;padding:3px 8px 3px 0;border-bottom:1px solid var(--line);vertical-align:top}
        .num{text-align:right;white-space:nowrap}.scroll{overflow-x:auto}
        .good{color:var(--good);font-weight:600}.bad{color:var(--bad);font-weight:600}
        @media (max-width:1000px){.plots{grid-template-columns:1fr 1fr}}
        @media (max-width:760px){.cards,.plots{grid-template-columns:1fr}header,main{padding:0 12px}
          body{font-size:14px}.numbers{grid-template-columns:repeat(2,minmax(0,1fr))}
          table.health thead{display:none}table.health tr{display:block;border-bottom:1px solid var(--line);padding:6px 0}
          table.health th,table.health td{display:block;border:0;padding:1px 0}
          table.health td::before{content:attr(data-label) ": ";color:var(--muted)}}
        """
}
