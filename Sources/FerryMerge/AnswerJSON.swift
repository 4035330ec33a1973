import FerryCore

/// The JSON text of change answers, written by hand: every answer of a batch is written twice (stored in
/// `ferry_changes`, and sent to the device), and Foundation's `JSONEncoder` was measured here as a large part of a
/// batch's time. The output is what `JSONEncoder` writes for ``ChangeResult`` (`row` always present, `null` when
/// there is none; `message` and `lost` only when set), up to the order of keys and the escaping of `/`, and decodes to the
/// same value (`AnswerJSONTests`).
///
/// ```swift
/// let body = AnswerJSON.encode(ChangeResults(results: results))   // {"results":[…]}
/// ```
public enum AnswerJSON {
    /// `{"results":[…]}`.
    public static func encode(_ results: ChangeResults) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(32 + results.results.count * 256)
        out.append(contentsOf: #"{"results":["#.utf8)
        for (i, result) in results.results.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            write(result, to: &out)
        }
        out.append(contentsOf: "]}".utf8)
        return out
    }

    /// `[…]`: the answers as a JSON array.
    public static func encodeArray(_ results: [ChangeResult]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(2 + results.count * 256)
        out.append(UInt8(ascii: "["))
        for (i, result) in results.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            write(result, to: &out)
        }
        out.append(UInt8(ascii: "]"))
        return out
    }

    /// One answer as a JSON object.
    public static func encode(_ result: ChangeResult) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(result, to: &out)
        return out
    }

    static func write(_ result: ChangeResult, to out: inout [UInt8]) {
        out.append(contentsOf: #"{"id":"#.utf8)
        string(result.id, to: &out)
        out.append(contentsOf: #","status":""#.utf8)
        out.append(contentsOf: result.status.rawValue.utf8)
        out.append(contentsOf: #"","row":"#.utf8)
        if let row = result.row {
            out.append(UInt8(ascii: "{"))
            var first = true
            for (name, value) in row {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                string(name, to: &out)
                out.append(UInt8(ascii: ":"))
                self.value(value, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        } else {
            out.append(contentsOf: "null".utf8)
        }
        if let message = result.message {
            out.append(contentsOf: #","message":"#.utf8)
            string(message, to: &out)
        }
        if let lost = result.lost {
            out.append(contentsOf: #","lost":["#.utf8)
            for (i, name) in lost.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                string(name, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(UInt8(ascii: "}"))
    }

    static func value(_ value: JSONValue, to out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .int(let i): integer(i, to: &out)
        // Swift prints a finite Double as a JSON number (`1.5`, `1e-07`, `1e+16`); a row never holds NaN or
        // infinity (TableSchema.value keeps those as strings), and nothing else makes one.
        case .double(let d): out.append(contentsOf: (d.isFinite ? String(d) : "null").utf8)
        case .string(let s): string(s, to: &out)
        }
    }

    /// The decimal digits of `value`, written in place (a row holds several integers, and `String(i)` allocated a
    /// string for each).
    static func integer(_ value: Int64, to out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var count = 1
        var rest = magnitude / 10
        while rest > 0 {
            count += 1
            rest /= 10
        }
        out.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: count))
        var i = out.count
        repeat {
            i -= 1
            out[i] = UInt8(ascii: "0") + UInt8(magnitude % 10)
            magnitude /= 10
        } while magnitude > 0
    }

    /// A JSON string (RFC 8259 §7): `"` and `\` escaped, control characters as `\n`, `\t`, … or `\u00XX`, the rest
    /// as UTF-8.
    static func string(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        let utf8 = text.utf8
        // Most strings need no escape: scanned over contiguous bytes where the string has them (native strings do).
        let plain =
            utf8.withContiguousStorageIfAvailable { bytes in
                !bytes.contains { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }
            } ?? !utf8.contains { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }
        guard !plain else {
            out.append(contentsOf: utf8)
            out.append(UInt8(ascii: "\""))
            return
        }
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): out.append(contentsOf: #"\\"#.utf8)
            case 0x0A: out.append(contentsOf: #"\n"#.utf8)
            case 0x0D: out.append(contentsOf: #"\r"#.utf8)
            case 0x09: out.append(contentsOf: #"\t"#.utf8)
            case 0x08: out.append(contentsOf: #"\b"#.utf8)
            case 0x0C: out.append(contentsOf: #"\f"#.utf8)
            case 0x00..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out.append(contentsOf: #"\u00"#.utf8)
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0x0F)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
