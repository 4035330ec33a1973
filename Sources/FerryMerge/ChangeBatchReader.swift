import FerryCore

/// Reads a change batch straight from its bytes, for bodies that ``StrictJSON`` has already passed. `JSONDecoder`
/// decodes each ``JSONValue`` by trying one type after another, and every miss builds and throws a `DecodingError`:
/// about five per change of a typical batch, most of the time the changes route spent decoding.
///
/// It reads only the plain shape of a batch (the fields of ``ChangeBatch`` and ``Change``, other keys skipped, values
/// that are null, booleans, integers or strings) and answers nil for anything else: a missing or mistyped field, a
/// number with a fraction or exponent, an unknown `op`. Then `JSONDecoder` decodes the body, so such a batch gets
/// exactly the value or the error it always did.
struct ChangeBatchReader {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var i = 0

    /// The batch in `bytes` (strict JSON), or nil when it is not of the plain shape.
    static func read(_ bytes: UnsafeBufferPointer<UInt8>) -> ChangeBatch? {
        var reader = ChangeBatchReader(bytes: bytes)
        guard let batch = reader.batch() else { return nil }
        reader.skipWhitespace()
        return reader.i == bytes.count ? batch : nil
    }

    private init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    private var current: UInt8? { i < bytes.count ? bytes[i] : nil }

    private mutating func skipWhitespace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
    }

    private mutating func take(_ byte: UInt8) -> Bool {
        skipWhitespace()
        guard current == byte else { return false }
        i += 1
        return true
    }

    /// `{ "key": value, … }`, calling `field` for each key; false when `field` refused one or the text does not fit.
    private mutating func object(_ field: (inout ChangeBatchReader, String) -> Bool) -> Bool {
        guard take(UInt8(ascii: "{")) else { return false }
        if take(UInt8(ascii: "}")) { return true }
        repeat {
            skipWhitespace()
            guard let name = string(), take(UInt8(ascii: ":")), field(&self, name) else { return false }
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "}"))
    }

    private mutating func batch() -> ChangeBatch? {
        var clientId: String?
        var sentAt: String?
        var changes: [Change]?
        let read = object { r, name in
            switch name {
            case "clientId":
                clientId = r.string()
                return clientId != nil
            case "sentAt":
                sentAt = r.string()
                return sentAt != nil
            case "changes":
                changes = r.changes()
                return changes != nil
            default: return r.skipValue()
            }
        }
        guard read, let clientId, let sentAt, let changes else { return nil }
        return ChangeBatch(clientId: clientId, sentAt: sentAt, changes: changes)
    }

    private mutating func changes() -> [Change]? {
        guard take(UInt8(ascii: "[")) else { return nil }
        var out: [Change] = []
        if take(UInt8(ascii: "]")) { return out }
        repeat {
            guard let change = change() else { return nil }
            out.append(change)
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "]")) ? out : nil
    }

    private mutating func change() -> Change? {
        var id: String?
        var table: String?
        var op: Change.Operation?
        var key: [String: JSONValue]?
        var values: [String: JSONValue]?
        var editedAt: String?
        // Outer nil: absent (nil in the change); inner nil: JSON null (also nil in the change).
        var baseUpdatedAt: String??
        var base: [String: JSONValue]??
        let read = object { r, name in
            switch name {
            case "id":
                id = r.string()
                return id != nil
            case "table":
                table = r.string()
                return table != nil
            case "op":
                op = r.string().flatMap(Change.Operation.init(rawValue:))
                return op != nil
            case "key":
                key = r.values()
                return key != nil
            case "values":
                values = r.values()
                return values != nil
            case "editedAt":
                editedAt = r.string()
                return editedAt != nil
            case "baseUpdatedAt":
                if r.null() {
                    baseUpdatedAt = .some(nil)
                    return true
                }
                guard let text = r.string() else { return false }
                baseUpdatedAt = text
                return true
            case "base":
                if r.null() {
                    base = .some(nil)
                    return true
                }
                guard let object = r.values() else { return false }
                base = object
                return true
            default: return r.skipValue()
            }
        }
        guard read, let id, let table, let op, let key, let values, let editedAt else { return nil }
        return Change(
            id: id, table: table, op: op, key: key, values: values, editedAt: editedAt,
            baseUpdatedAt: baseUpdatedAt ?? nil, base: base ?? nil)
    }

    /// `{ "column": value, … }` of null, booleans, integers and strings.
    private mutating func values() -> [String: JSONValue]? {
        var out: [String: JSONValue] = [:]
        let read = object { r, name in
            guard let value = r.value() else { return false }
            out[name] = value
            return true
        }
        return read ? out : nil
    }

    private mutating func value() -> JSONValue? {
        skipWhitespace()
        guard let b = current else { return nil }
        switch b {
        case UInt8(ascii: "\""): return string().map(JSONValue.string)
        case UInt8(ascii: "n"): return null() ? .null : nil
        case UInt8(ascii: "t"): return literal("true") ? .bool(true) : nil
        case UInt8(ascii: "f"): return literal("false") ? .bool(false) : nil
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            let start = i
            i += 1
            while let d = current, d >= UInt8(ascii: "0") && d <= UInt8(ascii: "9") { i += 1 }
            // A fraction or an exponent: JSONDecoder decides what that number is.
            if let d = current, d == UInt8(ascii: ".") || d == UInt8(ascii: "e") || d == UInt8(ascii: "E") {
                return nil
            }
            return Int64(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self))
                .map(JSONValue.int)
        default: return nil
        }
    }

    private mutating func null() -> Bool {
        skipWhitespace()
        return literal("null")
    }

    private mutating func literal(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard i + count <= bytes.count else { return false }
        for k in 0..<count where bytes[i + k] != word.utf8Start[k] { return false }
        i += count
        return true
    }

    /// Skips a value of a key this reader does not use (the text is strict JSON: a container ends at the bracket
    /// that balances it, brackets inside strings aside).
    private mutating func skipValue() -> Bool {
        skipWhitespace()
        guard let first = current else { return false }
        switch first {
        case UInt8(ascii: "\""): return string() != nil
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            while let b = current {
                switch b {
                case UInt8(ascii: "\""):
                    guard string() != nil else { return false }
                    continue
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 {
                        i += 1
                        return true
                    }
                default: break
                }
                i += 1
            }
            return false
        default:
            // A number or a literal: up to the next delimiter.
            while let b = current, b != UInt8(ascii: ","), b != UInt8(ascii: "}"), b != UInt8(ascii: "]"),
                b != 0x20, b != 0x0A, b != 0x0D, b != 0x09
            {
                i += 1
            }
            return true
        }
    }

    /// A JSON string, unescaped (the text is strict JSON: escapes and UTF-8 are well formed).
    private mutating func string() -> String? {
        skipWhitespace()
        guard current == UInt8(ascii: "\"") else { return nil }
        i += 1
        let start = i
        while let b = current, b != UInt8(ascii: "\""), b != UInt8(ascii: "\\") { i += 1 }
        guard current != nil else { return nil }
        if current == UInt8(ascii: "\"") {
            defer { i += 1 }
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self)
        }
        var out = Array(bytes[start..<i])
        while let b = current {
            i += 1
            switch b {
            case UInt8(ascii: "\""):
                return String(decoding: out, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard let e = current else { return nil }
                i += 1
                switch e {
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    guard var scalar = hex4() else { return nil }
                    if (0xD800..<0xDC00).contains(scalar) {
                        guard current == UInt8(ascii: "\\"), i + 1 < bytes.count, bytes[i + 1] == UInt8(ascii: "u")
                        else { return nil }
                        i += 2
                        guard let low = hex4(), (0xDC00..<0xE000).contains(low) else { return nil }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { return nil }
                    out.append(contentsOf: String(Character(unicode)).utf8)
                default: out.append(e)  // \" \\ \/
                }
            default:
                out.append(b)
            }
        }
        return nil
    }

    private mutating func hex4() -> UInt32? {
        guard i + 4 <= bytes.count else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = StrictJSON.hexDigit(bytes[i]) else { return nil }
            value = value << 4 + UInt32(digit)
            i += 1
        }
        return value
    }
}
