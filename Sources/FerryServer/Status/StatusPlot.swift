import Foundation

/// Inline SVG plots of the status page: stacked bars over the last hour and lines over retained versions. Pure
/// functions from numbers to markup, no script.
///
/// Every series is told apart without colour: each has a fill pattern (solid, hatch, dots, cross, stripes) defined
/// once in ``patternDefinitions``, and the page names it in a text legend next to its swatch; lines differ in dash
/// and marker shape and carry a direct label. Each plot has an `aria-label` and a `<title>`.
enum StatusPlot {
    /// One stacked series: its label (for the accessible title) and style index (pattern), one value per bar.
    struct Series {
        let label: String
        let style: Int
        let values: [Double]
    }

    /// The fill of style `index`: a pattern that also reads in greyscale.
    static func fill(_ index: Int) -> String { "url(#ferry-pattern-\(index % patternCount))" }

    static let patternCount = 6

    /// `<svg>` with the six patterns, rendered once, hidden, at the top of the page; every plot refers to them.
    static var patternDefinitions: String {
        // Okabe–Ito colours (distinguishable with colour-vision deficiencies), each with its own texture.
        let colours = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#7F7F7F"]
        let textures = [
            "",
            #"<path d="M-2 2L2 -2M0 8L8 0M6 10L10 6" stroke='#fff' stroke-width="1.6"/>"#,
            #"<circle cx="4" cy="4" r="1.6" fill='#fff'/>"#,
            #"<path d="M0 0L8 8M8 0L0 8" stroke='#fff' stroke-width="1.2"/>"#,
            #"<path d="M0 2H8M0 6H8" stroke='#fff' stroke-width="1.4"/>"#,
            #"<path d="M2 0V8M6 0V8" stroke='#fff' stroke-width="1.4"/>"#,
        ]
        var svg = #"<svg width="0" height="0" style="position:absolute" aria-hidden="true" focusable="false"><defs>"#
        for index in 0..<patternCount {
            svg += #"<pattern id="ferry-pattern-\#(index)" width="8" height="8" patternUnits="userSpaceOnUse">"#
            svg += #"<rect width="8" height="8" fill="\#(colours[index])"/>\#(textures[index])</pattern>"#
        }
        return svg + "</defs></svg>"
    }

    /// A small swatch of style `index` for a legend entry.
    static func swatch(_ index: Int) -> String {
        #"<svg class="swatch" viewBox="0 0 14 14" aria-hidden="true"><rect width="14" height="14" fill="\#(fill(index))" stroke='#333' stroke-width="1"/></svg>"#
    }

    /// Stacked bars, one per bucket (oldest left), with the series drawn bottom-up in order. `name` goes into
    /// `data-plot`; `tickLabels` are (bucket index, text) pairs under the axis; `format` renders the top value.
    static func stackedBars(
        name: String, title: String, series: [Series], tickLabels: [(Int, String)], format: (Double) -> String
    ) -> String {
        let width = 400.0
        let height = 170.0
        let left = 50.0
        let right = 8.0
        let top = 12.0
        let bottom = 24.0
        let count = series.first?.values.count ?? 0
        let totals = (0..<count).map { index in series.reduce(0) { $0 + $1.values[index] } }
        let peak = totals.max() ?? 0
        let scale = peak > 0 ? (height - top - bottom) / peak : 0
        let slot = count > 0 ? (width - left - right) / Double(count) : 0
        let baseline = height - bottom
        var svg = svgOpen(name: name, title: title, width: width, height: height)
        svg += axes(left: left, right: width - right, top: top, baseline: baseline)
        svg += label(x: left - 6, y: top + 4, anchor: "end", text: format(peak))
        svg += label(x: left - 6, y: baseline, anchor: "end", text: "0")
        var stackTop = Array(repeating: baseline, count: count)
        for entry in series {
            var d = ""
            for index in 0..<count where entry.values[index] > 0 {
                let barHeight = max(1, entry.values[index] * scale)
                let x = left + Double(index) * slot + 0.5
                stackTop[index] -= barHeight
                d += "M\(n(x)) \(n(stackTop[index]))h\(n(max(1, slot - 1)))v\(n(barHeight))h\(n(-max(1, slot - 1)))Z"
            }
            if !d.isEmpty {
                svg +=
                    #"<path class="series" data-series="\#(escape(entry.label))" d="\#(d)" fill="\#(fill(entry.style))" stroke='#222' stroke-width="0.4"/>"#
            }
        }
        for (index, text) in tickLabels {
            svg += label(x: left + (Double(index) + 0.5) * slot, y: height - 6, anchor: "middle", text: text)
        }
        if peak == 0 {
            svg += label(
                x: (left + width) / 2, y: (top + baseline) / 2, anchor: "middle", text: "none in the last hour")
        }
        return svg + "</svg>"
    }

    /// A dataset's size (solid line, round markers), the patch from the previous version (dotted line, triangle
    /// markers, on the size scale, when published) and row count (dashed line, square markers) over its retained
    /// versions, each in its own band with its own scale and a direct label at the newest point; the x axis names
    /// each version and its publish time (UTC).
    static func versions(name: String, title: String, versions: [StatusReport.Version]) -> String {
        let width = 480.0
        let height = 232.0
        let left = 60.0
        let right = 104.0
        let bands = [(top: 12.0, bottom: 92.0), (top: 116.0, bottom: 196.0)]
        var svg = svgOpen(name: name, title: title, width: width, height: height)
        let count = versions.count
        let step = count > 1 ? (width - left - right) / Double(count - 1) : 0
        func x(_ index: Int) -> Double { count > 1 ? left + Double(index) * step : (left + width - right) / 2 }
        let lines: [(label: String, values: [Double], format: (Double) -> String, dash: String, square: Bool)] = [
            ("size", versions.map { Double($0.size) }, { StatusFormat.bytes(Int64($0)) }, "", false),
            (
                "rows", versions.map { Double($0.rows) }, { StatusFormat.count(Int($0)) }, #" stroke-dasharray="6 4""#,
                true
            ),
        ]
        for (band, line) in zip(bands, lines) {
            let peak = max(line.values.max() ?? 0, 1)
            func y(_ value: Double) -> Double { band.bottom - value / peak * (band.bottom - band.top) }
            svg += axes(left: left, right: width - right, top: band.top, baseline: band.bottom)
            svg += label(x: left - 6, y: band.top + 4, anchor: "end", text: line.format(peak))
            svg += label(x: left - 6, y: band.bottom, anchor: "end", text: "0")
            var d = ""
            var markers = ""
            for (index, value) in line.values.enumerated() {
                let px = x(index)
                let py = y(value)
                d += (index == 0 ? "M" : "L") + "\(n(px)) \(n(py))"
                markers +=
                    line.square
                    ? #"<rect x="\#(n(px - 3.5))" y="\#(n(py - 3.5))" width="7" height="7" fill='#E69F00' stroke='#222'/>"#
                    : #"<circle cx="\#(n(px))" cy="\#(n(py))" r="4" fill='#0072B2' stroke='#222'/>"#
            }
            if count == 1 { d += "h0.01" }  // a single version: a dot, still a non-empty path
            let colour = line.square ? "#B36B00" : "#0072B2"
            svg +=
                #"<path class="series" data-series="\#(line.label)" d="\#(d)" fill="none" stroke="\#(colour)" stroke-width="2"\#(line.dash)/>"#
            svg += markers
            if let last = line.values.last {
                svg += label(
                    x: x(count - 1) + 10, y: y(last) + 4, anchor: "start", text: "\(line.label) \(line.format(last))")
            }
            if line.label == "size" { svg += patchLine(versions: versions, x: x, y: y) }
        }
        let every = max(1, Int((Double(count) / 6).rounded(.up)))
        for (index, version) in versions.enumerated() where index % every == 0 || index == count - 1 {
            svg += label(x: x(index), y: 212, anchor: "middle", text: "v\(version.version)")
            svg += label(x: x(index), y: 226, anchor: "middle", text: StatusFormat.shortTime(version.createdAt))
        }
        return svg + "</svg>"
    }

    /// Each version's patch from the previous retained version, in the size band on the size scale: a dotted line
    /// with triangle markers (broken where a version has no such patch) and a direct label at the newest one.
    /// Nothing when no version has one.
    private static func patchLine(versions: [StatusReport.Version], x: (Int) -> Double, y: (Double) -> Double) -> String
    {
        var d = ""
        var markers = ""
        var newest: (index: Int, size: Int64)?
        var drawing = false
        for (index, version) in versions.enumerated() {
            guard index > 0, let patch = version.patches.first(where: { $0.from == versions[index - 1].version }) else {
                drawing = false
                continue
            }
            let px = x(index)
            let py = y(Double(patch.size))
            d += (drawing ? "L" : "M") + "\(n(px)) \(n(py))"
            drawing = true
            markers += #"<path d="M\#(n(px)) \#(n(py - 5))l4.5 8h-9Z" fill='#009E73' stroke='#222'/>"#
            newest = (index, patch.size)
        }
        guard let newest else { return "" }
        d += "h0.01"  // a lone patch is still a visible, non-empty path
        var svg =
            #"<path class="series" data-series="patch" d="\#(d)" fill="none" stroke='#007A5A' stroke-width="2" stroke-dasharray="2 3"/>"#
        svg += markers
        svg += label(
            x: x(newest.index) + 10, y: y(Double(newest.size)) - 8, anchor: "start",
            text: "patch \(StatusFormat.bytes(newest.size))")
        return svg
    }

    private static func svgOpen(name: String, title: String, width: Double, height: Double) -> String {
        let title = escape(title)
        return
            #"<svg class="plot" data-plot="\#(escape(name))" viewBox="0 0 \#(n(width)) \#(n(height))" role="img" aria-label="\#(title)" preserveAspectRatio="xMidYMid meet"><title>\#(title)</title>"#
    }

    private static func axes(left: Double, right: Double, top: Double, baseline: Double) -> String {
        #"<path class="axis" d="M\#(n(left)) \#(n(top))V\#(n(baseline))H\#(n(right))" fill="none" stroke='#555' stroke-width="1"/>"#
    }

    private static func label(x: Double, y: Double, anchor: String, text: String) -> String {
        #"<text x="\#(n(x))" y="\#(n(y))" text-anchor="\#(anchor)">\#(escape(text))</text>"#
    }

    /// A coordinate with at most two decimals.
    static func n(_ value: Double) -> String {
        let rounded = (value * 100).rounded() / 100
        return rounded == rounded.rounded() ? String(Int(rounded)) : String(rounded)
    }

    static func escape(_ text: String) -> String { StatusFormat.escape(text) }
}
