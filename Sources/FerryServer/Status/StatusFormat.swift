import FerryCore
import Foundation

/// Text forms of the status page's numbers and HTML escaping. The page shows these; the exact values travel in
/// `data-value` attributes next to them.
enum StatusFormat {
    /// `512 B`, `48.0 KiB`, `3.2 MiB`, `1.1 GiB`.
    static func bytes(_ value: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var amount = Double(value)
        var unit = 0
        while amount >= 1024, unit < units.count - 1 {
            amount /= 1024
            unit += 1
        }
        return unit == 0 ? "\(value) B" : String(format: "%.1f %@", amount, units[unit])
    }

    /// `1234567` as `1 234 567` (thin spaces do not depend on a locale).
    static func count(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var grouped = ""
        for (index, character) in digits.enumerated() {
            if index > 0, (digits.count - index) % 3 == 0 { grouped += "\u{202F}" }
            grouped.append(character)
        }
        return (value < 0 ? "-" : "") + grouped
    }

    /// `42 s`, `5 min`, `3 h 12 min`, `4 d 2 h`.
    static func duration(seconds: Int) -> String {
        switch seconds {
        case ..<60: return "\(seconds) s"
        case ..<3600: return "\(seconds / 60) min"
        case ..<86_400: return "\(seconds / 3600) h \(seconds % 3600 / 60) min"
        default: return "\(seconds / 86_400) d \(seconds % 86_400 / 3600) h"
        }
    }

    /// `2026-03-01T12:03:04.123Z` as `03-01 12:03` (UTC); other text as is.
    static func shortTime(_ timestamp: String) -> String {
        let characters = Array(timestamp)
        guard characters.count >= 16 else { return timestamp }
        return String(characters[5..<10]) + " " + String(characters[11..<16])
    }

    /// `2026-03-01T12:03:04.123Z` as `2026-03-01 12:03:04 UTC`.
    static func time(_ timestamp: String) -> String {
        let characters = Array(timestamp)
        guard characters.count >= 19 else { return timestamp }
        return String(characters[0..<10]) + " " + String(characters[11..<19]) + " UTC"
    }

    /// Escapes text for HTML element content and quoted attribute values.
    static func escape(_ text: String) -> String { markupEscaped(text) }
}
