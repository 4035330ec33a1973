import FerryCore

/// Formats PostgreSQL binary values as the text Ferry stores, into a caller's scratch buffer (no allocation on the
/// hot path). Returns the number of bytes written.
enum BinaryFormat {
    /// PostgreSQL's epoch (2000-01-01) in days and microseconds since the Unix epoch.
    static let epochDays: Int64 = 10_957
    static let epochMicros: Int64 = 946_684_800_000_000

    @inline(__always)
    static func hex(_ nibble: UInt8) -> UInt8 { nibble < 10 ? 48 + nibble : 87 + nibble }

    /// 16 bytes → `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (36 bytes).
    @inline(__always)
    static func uuid(_ source: UnsafeRawPointer, into out: UnsafeMutablePointer<UInt8>) -> Int {
        var o = 0
        for i in 0..<16 {
            if i == 4 || i == 6 || i == 8 || i == 10 {
                out[o] = UInt8(ascii: "-")
                o += 1
            }
            let byte = source.load(fromByteOffset: i, as: UInt8.self)
            out[o] = hex(byte >> 4)
            out[o + 1] = hex(byte & 0x0f)
            o += 2
        }
        return o
    }

    /// Days since 2000-01-01 → `YYYY-MM-DD`; ±infinity → `infinity` / `-infinity`.
    @inline(__always)
    static func date(_ pgDays: Int32, into out: UnsafeMutablePointer<UInt8>) -> Int {
        if pgDays == Int32.max { return ascii("infinity", into: out) }
        if pgDays == Int32.min { return ascii("-infinity", into: out) }
        let (y, m, d) = civil(fromDays: Int64(pgDays) + epochDays)
        guard (0...9999).contains(y) else { return ascii(Self.wideYearDate(y, m, d), into: out) }
        digits(y, 4, out)
        out[4] = UInt8(ascii: "-")
        digits(m, 2, out + 5)
        out[7] = UInt8(ascii: "-")
        digits(d, 2, out + 8)
        return 10
    }

    /// Microseconds since 2000-01-01 UTC → `YYYY-MM-DDTHH:MM:SS.sssZ` (milliseconds, truncated toward the past).
    @inline(__always)
    static func timestamp(_ pgMicros: Int64, into out: UnsafeMutablePointer<UInt8>) -> Int {
        if pgMicros == Int64.max { return ascii("infinity", into: out) }
        if pgMicros == Int64.min { return ascii("-infinity", into: out) }
        let (unixMicros, overflow) = pgMicros.addingReportingOverflow(epochMicros)
        if overflow { return ascii("infinity", into: out) }
        let millis = unixMicros >= 0 ? unixMicros / 1000 : (unixMicros - 999) / 1000
        let days = millis >= 0 ? millis / 86_400_000 : (millis - 86_399_999) / 86_400_000
        let msOfDay = millis - days * 86_400_000
        let (y, m, d) = civil(fromDays: days)
        guard (0...9999).contains(y) else { return ascii(Timestamp.format(unixMillis: millis), into: out) }
        digits(y, 4, out)
        out[4] = UInt8(ascii: "-")
        digits(m, 2, out + 5)
        out[7] = UInt8(ascii: "-")
        digits(d, 2, out + 8)
        out[10] = UInt8(ascii: "T")
        digits(msOfDay / 3_600_000, 2, out + 11)
        out[13] = UInt8(ascii: ":")
        digits((msOfDay / 60_000) % 60, 2, out + 14)
        out[16] = UInt8(ascii: ":")
        digits((msOfDay / 1000) % 60, 2, out + 17)
        out[19] = UInt8(ascii: ".")
        digits(msOfDay % 1000, 3, out + 20)
        out[23] = UInt8(ascii: "Z")
        return 24
    }

    @inline(__always)
    static func digits(_ value: Int64, _ width: Int, _ out: UnsafeMutablePointer<UInt8>) {
        var v = value
        var i = width - 1
        while i >= 0 {
            out[i] = UInt8(48 + v % 10)
            v /= 10
            i -= 1
        }
    }

    static func ascii(_ text: String, into out: UnsafeMutablePointer<UInt8>) -> Int {
        var n = 0
        for byte in text.utf8.prefix(48) {
            out[n] = byte
            n += 1
        }
        return n
    }

    static func wideYearDate(_ y: Int64, _ m: Int64, _ d: Int64) -> String {
        let two = { (v: Int64) in v < 10 ? "0\(v)" : "\(v)" }
        return "\(y)-\(two(m))-\(two(d))"
    }

    /// Days since 1970-01-01 → (year, month, day).
    @inline(__always)
    static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) { Timestamp.civilFromDays(days) }
}
