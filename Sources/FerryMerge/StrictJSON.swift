import FerryCore
import Foundation

/// A strict pass over an uploaded JSON text before Foundation decodes it: RFC 8259 grammar plus the rules a change
/// batch needs and `JSONDecoder` does not enforce.
///
/// Foundation keeps the last of two equal keys (so `{"op":"delete","op":"update"}` was applied as an update),
/// turns an integer beyond Int64 into a rounded Double, and recurses once per nesting level. This scanner is
/// iterative (a deep body costs no stack), reads each byte once, and refuses:
/// - a duplicate key in any object, compared after unescaping (`"op"` and `"\u006fp"` are the same key);
/// - nesting deeper than `maxDepth` (a batch is 4 levels deep);
/// - bytes that are not UTF-8, a lone surrogate escape, and NUL (`\u0000`, which PostgreSQL text cannot hold);
/// - an integer outside Int64, a number outside Double's range, a number longer than 1,024 characters;
/// - anything that is not JSON (trailing bytes, control characters in strings, `NaN`, leading zeros, …).
enum StrictJSON {
    /// Why a text was refused, and the byte offset where the scanner stopped.
    struct Failure: Error, Equatable, CustomStringConvertible {
        var reason: String
        var offset: Int
        var description: String { "\(reason) (at byte \(offset))" }
    }

    static let maxNumberLength = 1_024

    /// The value of a hexadecimal digit, nil for any other byte.
    static func hexDigit(_ b: UInt8) -> UInt8? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return b - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return b - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return b - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// Throws ``Failure`` unless `bytes` is one strict JSON value.
    static func check(_ bytes: Data, maxDepth: Int) throws(Failure) {
        let result: Failure? = bytes.withUnsafeBytes { raw in
            var scanner = Scanner(bytes: raw.bindMemory(to: UInt8.self), maxDepth: maxDepth)
            do throws(Failure) {
                try scanner.run()
                return nil
            } catch {
                return error
            }
        }
        if let result { throw result }
    }

    /// The keys of one open object. A few keys are compared one by one (hashing each key of each change cost more
    /// than the rest of the scan); from 16 on they go into a set, so an object of many keys stays linear.
    struct Keys {
        private var few: [[UInt8]] = []
        private var many: Set<[UInt8]>?

        /// Adds `key`; false when the object already has it.
        mutating func insert(_ key: [UInt8]) -> Bool {
            if many != nil { return many!.insert(key).inserted }
            if few.contains(key) { return false }
            few.append(key)
            if few.count >= 16 {
                many = Set(few)
                few = []
            }
            return true
        }
    }

    private struct Scanner {
        let bytes: UnsafeBufferPointer<UInt8>
        let maxDepth: Int
        var i = 0
        /// One entry per open container: the keys seen so far for an object, nil for an array.
        var stack: [Keys?] = []

        init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
            self.bytes = bytes
            self.maxDepth = maxDepth
        }

        func fail(_ reason: String) -> Failure { Failure(reason: reason, offset: i) }

        var current: UInt8? { i < bytes.count ? bytes[i] : nil }

        mutating func skipWhitespace() {
            while let b = current, b == 0x20 || b == 0x0A || b == 0x0D || b == 0x09 { i += 1 }
        }

        mutating func expect(_ byte: UInt8, _ what: String) throws(Failure) {
            skipWhitespace()
            guard current == byte else {
                throw fail(current == nil ? "the JSON text ends early; expected \(what)" : "expected \(what)")
            }
            i += 1
        }

        mutating func run() throws(Failure) {
            skipWhitespace()
            while true {
                // A value is expected here; one that opens a non-empty container expects its first value next.
                if try value() { continue }
                // After a value: close containers, or a comma and the next value.
                while true {
                    skipWhitespace()
                    guard let top = stack.last else {
                        guard current == nil else { throw fail("unexpected bytes after the JSON value") }
                        return
                    }
                    guard let b = current else {
                        throw fail("the JSON text ends early; an object or array is not closed")
                    }
                    i += 1
                    if b == UInt8(ascii: ",") {
                        if top != nil { try key() }
                        skipWhitespace()
                        break
                    } else if b == UInt8(ascii: "}") && top != nil || b == UInt8(ascii: "]") && top == nil {
                        stack.removeLast()
                    } else {
                        i -= 1
                        throw fail(top != nil ? "expected ',' or '}'" : "expected ',' or ']'")
                    }
                }
            }
        }

        /// Scans one scalar value or an empty container (false), or opens a container and, for an object, reads its
        /// first key (true: a value comes next).
        mutating func value() throws(Failure) -> Bool {
            skipWhitespace()
            guard let b = current else { throw fail("the JSON text ends early; expected a value") }
            switch b {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                guard stack.count < maxDepth else {
                    throw fail("the JSON text is nested deeper than \(maxDepth) levels")
                }
                i += 1
                skipWhitespace()
                if b == UInt8(ascii: "{") {
                    if current == UInt8(ascii: "}") {
                        i += 1
                        return false
                    }
                    stack.append(Keys())
                    try key()
                } else {
                    if current == UInt8(ascii: "]") {
                        i += 1
                        return false
                    }
                    stack.append(nil)
                }
                return true
            case UInt8(ascii: "\""): _ = try string(keep: false)
            case UInt8(ascii: "t"): try literal("true")
            case UInt8(ascii: "f"): try literal("false")
            case UInt8(ascii: "n"): try literal("null")
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try number()
            default:
                throw fail("expected a JSON value")
            }
            return false
        }

        /// Reads `"key" :` of the innermost object and refuses a key it already holds.
        mutating func key() throws(Failure) {
            skipWhitespace()
            guard current == UInt8(ascii: "\"") else { throw fail("expected an object key in double quotes") }
            let start = i
            let name = try string(keep: true)
            guard stack[stack.count - 1]!.insert(name) else {
                i = start
                throw fail("duplicate key \"\(String(decoding: name.prefix(64), as: UTF8.self))\" in one object")
            }
            try expect(UInt8(ascii: ":"), "':' after an object key")
        }

        mutating func literal(_ word: StaticString) throws(Failure) {
            let count = word.utf8CodeUnitCount
            guard i + count <= bytes.count,
                memcmp(bytes.baseAddress! + i, word.utf8Start, count) == 0
            else { throw fail("expected a JSON value") }
            i += count
        }

        mutating func number() throws(Failure) {
            let start = i
            var integral = true
            if current == UInt8(ascii: "-") { i += 1 }
            guard let first = current, isDigit(first) else { throw fail("a number needs a digit") }
            i += 1
            if first != UInt8(ascii: "0") { while let b = current, isDigit(b) { i += 1 } }
            if current == UInt8(ascii: ".") {
                integral = false
                i += 1
                guard let b = current, isDigit(b) else { throw fail("a number needs digits after '.'") }
                while let b = current, isDigit(b) { i += 1 }
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                integral = false
                i += 1
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { i += 1 }
                guard let b = current, isDigit(b) else { throw fail("a number needs digits in its exponent") }
                while let b = current, isDigit(b) { i += 1 }
            }
            guard i - start <= StrictJSON.maxNumberLength else {
                throw Failure(reason: "a number is longer than \(StrictJSON.maxNumberLength) characters", offset: start)
            }
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self)
            if integral {
                guard Int64(text) != nil else {
                    throw Failure(reason: "the integer \(text.prefix(40)) is outside the 64-bit range", offset: start)
                }
            } else {
                guard let d = Double(text), d.isFinite else {
                    throw Failure(
                        reason: "the number \(text.prefix(40)) is outside the range of a double", offset: start)
                }
            }
        }

        func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }

        /// Scans a string from its opening quote; returns its unescaped UTF-8 bytes when `keep` (object keys).
        mutating func string(keep: Bool) throws(Failure) -> [UInt8] {
            var out: [UInt8] = []
            i += 1
            while true {
                guard let b = current else { throw fail("the JSON text ends inside a string") }
                switch b {
                case UInt8(ascii: "\""):
                    i += 1
                    return out
                case UInt8(ascii: "\\"):
                    let scalar = try escape()
                    if keep { out.append(contentsOf: Array(String(Character(scalar)).utf8)) }
                case 0x00..<0x20:
                    throw fail(b == 0 ? "a string holds NUL" : "a string holds an unescaped control character")
                case 0x20..<0x80:
                    if keep { out.append(b) }
                    i += 1
                default:
                    let start = i
                    try utf8Sequence()
                    if keep { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<i])) }
                }
            }
        }

        /// Reads `\x` or `\uXXXX` (a surrogate pair as two escapes) and returns the scalar it stands for.
        mutating func escape() throws(Failure) -> Unicode.Scalar {
            i += 1
            guard let b = current else { throw fail("the JSON text ends inside a string") }
            i += 1
            switch b {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): return Unicode.Scalar(b)
            case UInt8(ascii: "b"): return "\u{08}"
            case UInt8(ascii: "f"): return "\u{0C}"
            case UInt8(ascii: "n"): return "\n"
            case UInt8(ascii: "r"): return "\r"
            case UInt8(ascii: "t"): return "\t"
            case UInt8(ascii: "u"):
                let unit = try hex4()
                var value = UInt32(unit)
                if (0xD800...0xDBFF).contains(unit) {
                    guard current == UInt8(ascii: "\\"), i + 1 < bytes.count, bytes[i + 1] == UInt8(ascii: "u") else {
                        throw fail("a string holds a lone surrogate escape")
                    }
                    i += 2
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw fail("a string holds a lone surrogate escape") }
                    value = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(unit) {
                    throw fail("a string holds a lone surrogate escape")
                }
                guard value != 0 else { throw fail("a string holds NUL (\\u0000)") }
                // Every value here is a valid scalar: surrogates were combined or refused above.
                return Unicode.Scalar(value)!
            default:
                i -= 1
                throw fail("a string holds an unknown escape")
            }
        }

        mutating func hex4() throws(Failure) -> UInt16 {
            guard i + 4 <= bytes.count else { throw fail("the JSON text ends inside a \\u escape") }
            var value: UInt16 = 0
            for _ in 0..<4 {
                guard let digit = StrictJSON.hexDigit(bytes[i]) else {
                    throw fail("a \\u escape needs four hex digits")
                }
                value = value << 4 | UInt16(digit)
                i += 1
            }
            return value
        }

        /// One well-formed UTF-8 sequence of 2 to 4 bytes (Unicode Table 3-7: no overlong form, no surrogate,
        /// nothing above U+10FFFF).
        mutating func utf8Sequence() throws(Failure) {
            let lead = bytes[i]
            let (count, low, high): (Int, UInt8, UInt8)
            switch lead {
            case 0xC2...0xDF: (count, low, high) = (1, 0x80, 0xBF)
            case 0xE0: (count, low, high) = (2, 0xA0, 0xBF)
            case 0xE1...0xEC, 0xEE...0xEF: (count, low, high) = (2, 0x80, 0xBF)
            case 0xED: (count, low, high) = (2, 0x80, 0x9F)
            case 0xF0: (count, low, high) = (3, 0x90, 0xBF)
            case 0xF1...0xF3: (count, low, high) = (3, 0x80, 0xBF)
            case 0xF4: (count, low, high) = (3, 0x80, 0x8F)
            default: throw fail("the body is not UTF-8")
            }
            guard i + count < bytes.count else { throw fail("the body is not UTF-8") }
            for k in 1...count {
                let b = bytes[i + k]
                let (lo, hi) = k == 1 ? (low, high) : (UInt8(0x80), UInt8(0xBF))
                guard b >= lo && b <= hi else { throw fail("the body is not UTF-8") }
            }
            i += count + 1
        }
    }
}
