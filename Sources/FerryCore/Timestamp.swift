import Foundation

/// ISO-8601 UTC timestamps with millisecond precision, `YYYY-MM-DDTHH:MM:SS.sssZ`: the one text form Ferry uses
/// for time in snapshots, manifests and change batches. Sorts correctly as text.
///
/// ```swift
/// Timestamp.format(Date(timeIntervalSince1970: 0)) // "1970-01-01T00:00:00.000Z"
/// ```
public enum Timestamp {
    /// Formats a date as `YYYY-MM-DDTHH:MM:SS.sssZ` (UTC, milliseconds truncated toward the past).
    public static func format(_ date: Date) -> String {
        let millis = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        return format(unixMillis: millis)
    }

    /// Formats milliseconds since 1970-01-01T00:00:00Z.
    public static func format(unixMillis: Int64) -> String {
        let days = unixMillis >= 0 ? unixMillis / 86_400_000 : (unixMillis - 86_399_999) / 86_400_000
        let msOfDay = unixMillis - days * 86_400_000
        let (y, m, d) = civilFromDays(days)
        let h = msOfDay / 3_600_000
        let mi = (msOfDay / 60_000) % 60
        let s = (msOfDay / 1000) % 60
        let ms = msOfDay % 1000
        return pad(y, 4) + "-" + pad(m, 2) + "-" + pad(d, 2) + "T" + pad(h, 2) + ":" + pad(mi, 2) + ":" + pad(s, 2)
            + "." + pad(ms, 3) + "Z"
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fff…]Z` or with a `±HH:MM` offset; fractions beyond milliseconds are truncated.
    /// Returns milliseconds since the epoch, or nil when the text is not such a timestamp.
    public static func parseMillis(_ text: String) -> Int64? {
        // Read in place: the merge engine parses two of these per change.
        var text = text
        return text.withUTF8 { parseMillis(utf8: $0) }
    }

    /// ``parseMillis(_:)`` over UTF-8 bytes.
    static func parseMillis(utf8 b: UnsafeBufferPointer<UInt8>) -> Int64? {
        func num(_ from: Int, _ count: Int) -> Int64? {
            guard from + count <= b.count else { return nil }
            var v: Int64 = 0
            for i in from..<(from + count) {
                let c = b[i]
                guard c >= 48 && c <= 57 else { return nil }
                v = v * 10 + Int64(c - 48)
            }
            return v
        }
        guard b.count >= 20, let y = num(0, 4), b[4] == UInt8(ascii: "-"), let mo = num(5, 2),
            b[7] == UInt8(ascii: "-"),
            let d = num(8, 2), b[10] == UInt8(ascii: "T") || b[10] == UInt8(ascii: " "), let h = num(11, 2),
            b[13] == UInt8(ascii: ":"), let mi = num(14, 2), b[16] == UInt8(ascii: ":"), let s = num(17, 2)
        else { return nil }
        guard (1...12).contains(mo), (1...31).contains(d), h < 24, mi < 60, s < 61 else { return nil }
        var i = 19
        var ms: Int64 = 0
        if i < b.count, b[i] == UInt8(ascii: ".") {
            i += 1
            var digits = 0
            while i < b.count, b[i] >= 48, b[i] <= 57 {
                if digits < 3 { ms = ms * 10 + Int64(b[i] - 48) }
                digits += 1
                i += 1
            }
            guard digits > 0 else { return nil }
            while digits < 3 {
                ms *= 10
                digits += 1
            }
        }
        var offsetMinutes: Int64 = 0
        guard i < b.count else { return nil }
        if b[i] == UInt8(ascii: "Z") {
            i += 1
        } else if b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            let sign: Int64 = b[i] == UInt8(ascii: "+") ? 1 : -1
            guard let oh = num(i + 1, 2) else { return nil }
            var j = i + 3
            var om: Int64 = 0
            if j < b.count, b[j] == UInt8(ascii: ":") { j += 1 }
            if j < b.count {
                guard let v = num(j, 2) else { return nil }
                om = v
                j += 2
            }
            offsetMinutes = sign * (oh * 60 + om)
            i = j
        } else {
            return nil
        }
        guard i == b.count else { return nil }
        let days = daysFromCivil(y, mo, d)
        return ((days * 24 + h) * 60 + mi) * 60_000 + s * 1000 + ms - offsetMinutes * 60_000
    }

    /// Parses a timestamp into a `Date` (see ``parseMillis(_:)``).
    public static func parse(_ text: String) -> Date? {
        parseMillis(text).map { Date(timeIntervalSince1970: Double($0) / 1000) }
    }

    /// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
    @inlinable
    public static func civilFromDays(_ z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }

    /// (year, month, day) → days since 1970-01-01.
    public static func daysFromCivil(_ y0: Int64, _ m: Int64, _ d: Int64) -> Int64 {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    @inline(__always)
    static func pad(_ v: Int64, _ width: Int) -> String {
        let s = String(v)
        return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
    }
}
