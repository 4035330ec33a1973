import FerryCore
import Foundation

/// `GET /status/devices`: the fleet as a table on the status page (same token, same Content-Security-Policy: no
/// script), sorted on the server by the column a header links to (`?sort=behind&order=desc`). Each device shows how
/// far behind it is, in versions (the current version of its scope minus the one it holds) and in time (since the
/// first version it lacks was published), and is flagged when
/// - `no patch`: no patch leads from the version it holds to the current one (behind more than the patch horizon,
///   or published without steps): its next fetch downloads the whole snapshot;
/// - `silent`: not seen for more than a day;
/// - `401`/`403`: the server answered it so in the last day.
enum FleetPage {
    /// One device with what the page computes for it.
    struct Line {
        let record: DeviceRecord
        let current: Int?
        let behind: Int?
        /// Seconds since the first version the device lacks was published.
        let behindSeconds: Double?
        let flags: [String]
    }

    static let columns: [(key: String, title: String)] = [
        ("device", "Device"), ("dataset", "Dataset"), ("scope", "Scope"), ("holds", "Holds"),
        ("behind", "Behind (versions)"), ("behindTime", "Behind (time)"), ("lastSeen", "Last seen"),
        ("client", "Client"), ("outbox", "Outbox"), ("push", "Last push"), ("error", "Last error"), ("flags", "Flags"),
    ]

    /// The lines of `records`, with the catalog's current versions.
    static func lines(_ records: [DeviceRecord], catalog: SnapshotCatalog, now: Date) -> [Line] {
        records.map { record in
            var view: SnapshotCatalog.SnapshotView?
            switch catalog.access(record.dataset) {
            case .everyone(let one): view = one
            case .scoped(let views): view = record.scope.flatMap { views[$0] }
            case nil: view = nil
            }
            let current = view?.manifest.version
            var behind: Int?
            var behindSeconds: Double?
            var flags: [String] = []
            if let current, let held = record.heldVersion {
                behind = max(0, current - held)
                if current > held {
                    let lacking = view?.versions.keys.filter { $0 > held }.min()
                    if let lacking, let created = view?.versions[lacking]?.createdAt,
                        let millis = Timestamp.parseMillis(created)
                    {
                        behindSeconds = max(0, now.timeIntervalSince1970 - Double(millis) / 1000)
                    }
                    let key = PatchKey("\(held)-\(current)")
                    if let key, view?.patch(key) == nil, view?.catchUp?.covers(key) != true { flags.append("no patch") }
                }
            }
            if let seen = Timestamp.parseMillis(record.lastSeen),
                now.timeIntervalSince1970 - Double(seen) / 1000 > 86_400
            {
                flags.append("silent")
            }
            if let error = record.lastError, error.status == 401 || error.status == 403,
                let at = Timestamp.parseMillis(error.at), now.timeIntervalSince1970 - Double(at) / 1000 <= 86_400
            {
                flags.append(String(error.status))
            }
            return Line(record: record, current: current, behind: behind, behindSeconds: behindSeconds, flags: flags)
        }
    }

    /// `lines` sorted by column `key` (unknown: last seen), ties by dataset and device.
    static func sorted(_ lines: [Line], by key: String, descending: Bool) -> [Line] {
        func value(_ line: Line) -> String {
            let r = line.record
            func number(_ n: Double?) -> String { n.map { String(format: "%020.3f", $0 + 1e12) } ?? "" }
            switch key {
            case "device": return r.device
            case "dataset": return r.dataset
            case "scope": return r.scope ?? ""
            case "holds": return number(r.heldVersion.map(Double.init))
            case "behind": return number(line.behind.map(Double.init))
            case "behindTime": return number(line.behindSeconds)
            case "client": return r.client ?? ""
            case "outbox": return number(r.outbox.map(Double.init))
            case "push": return r.lastPush?.at ?? ""
            case "error": return r.lastError?.at ?? ""
            case "flags": return line.flags.joined(separator: ",")
            default: return r.lastSeen
            }
        }
        let keyed = lines.map { (value($0), $0) }
        return keyed.sorted { a, b in
            if a.0 != b.0 { return descending ? a.0 > b.0 : a.0 < b.0 }
            return (a.1.record.dataset, a.1.record.device) < (b.1.record.dataset, b.1.record.device)
        }.map(\.1)
    }

    /// The page. `token`: the `?token=` the page was opened with, carried into the sort links (nil with a bearer
    /// header).
    static func render(_ lines: [Line], sort: String, descending: Bool, token: String?, now: Date) -> String {
        var html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>Ferry devices</title><link rel="icon" href="data:,">
            <style>\(StatusPage.css)</style></head>
            <body><header><h1>Devices</h1><p>Generated \(StatusFormat.escape(Timestamp.format(now)))
             · \(lines.count) devices · <a href="\(link("/status", token: token))">status</a></p></header><main>
            <section id="devices"><div class="scroll"><table id="devices-table"><thead><tr>
            """
        for column in columns {
            let next = column.key == sort ? !descending : (column.key == "lastSeen" || column.key == "behind")
            let mark = column.key == sort ? (descending ? " ▼" : " ▲") : ""
            let href = link(
                "/status/devices", token: token, extra: "sort=\(column.key)&order=\(next ? "desc" : "asc")")
            html +=
                "<th scope=\"col\"\(column.key == sort ? " aria-sort=\"\(descending ? "descending" : "ascending")\"" : "")><a href=\"\(href)\" data-sort=\"\(column.key)\">\(column.title)\(mark)</a></th>"
        }
        html += "</tr></thead><tbody>"
        for line in lines { html += row(line) }
        return html + "</tbody></table></div></section></main></body></html>\n"
    }

    static func row(_ line: Line) -> String {
        let r = line.record
        func cell(_ text: String, numeric: Bool = false) -> String {
            "<td\(numeric ? " class=\"num\"" : "")>\(StatusFormat.escape(text))</td>"
        }
        var html = "<tr data-device=\"\(StatusFormat.escape(r.device))\">"
        html += cell(r.device) + cell(r.dataset) + cell(r.scope ?? "—")
        html += cell(r.heldVersion.map { "v\($0)" } ?? "never synced", numeric: true)
        html += cell(line.behind.map(String.init) ?? "—", numeric: true)
        html += cell(line.behindSeconds.map(duration) ?? "—", numeric: true)
        html += cell(StatusFormat.time(r.lastSeen)) + cell(r.client ?? "—")
        html += cell(r.outbox.map(String.init) ?? "—", numeric: true)
        if let push = r.lastPush {
            let counts = [
                ("applied", push.applied), ("merged", push.merged), ("rejected", push.rejected), ("gone", push.gone),
                ("invalid", push.invalid), ("forbidden", push.forbidden),
            ].compactMap { name, n in (n ?? 0) > 0 ? "\(n!) \(name)" : nil }.joined(separator: ", ")
            html += cell("\(StatusFormat.time(push.at)): \(counts.isEmpty ? "empty" : counts)")
        } else {
            html += cell("—")
        }
        html += cell(r.lastError.map { "\($0.status) at \(StatusFormat.time($0.at))" } ?? "—")
        html +=
            "<td>" + line.flags.map { "<span class=\"bad\">⚑ \(StatusFormat.escape($0))</span>" }.joined(separator: " ")
        return html + "</td></tr>"
    }

    static func duration(_ seconds: Double) -> String {
        switch seconds {
        case ..<120: return "\(Int(seconds)) s"
        case ..<7200: return "\(Int(seconds / 60)) min"
        case ..<172_800: return "\(Int(seconds / 3600)) h"
        default: return "\(Int(seconds / 86_400)) d"
        }
    }

    static func link(_ path: String, token: String?, extra: String? = nil) -> String {
        var query: [String] = []
        if let extra { query.append(extra) }
        if let token {
            query.append("token=\(token.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")")
        }
        return StatusFormat.escape(query.isEmpty ? path : "\(path)?\(query.joined(separator: "&"))")
    }
}
