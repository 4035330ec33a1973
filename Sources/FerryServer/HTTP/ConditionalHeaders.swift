/// Parsing of the request headers that select what to send: `If-None-Match`, `If-Range`, `Accept-Encoding`
/// (RFC 9110 §13.1.2, §13.1.5, §12.5.3).
///
/// Every value is read as UTF-8 bytes: these run on every conditional request (``RawNotModifiedHandler`` answers
/// thousands a second), and `Character`-wise scanning of a `Substring` was measured as a large part of that.
enum ConditionalHeaders {
    typealias Bytes = Substring.UTF8View

    /// An `If-None-Match` value: `*` or a list of entity tags, compared weakly (the opaque tags only).
    enum NoneMatch {
        case any
        case tags([Substring])
    }

    /// Parses `If-None-Match`; nil when malformed (then the precondition is ignored, as for an absent header).
    static func noneMatch(_ value: Substring) -> NoneMatch? {
        var rest = value.utf8
        trimSpaces(&rest)
        if rest.count == 1 && rest.first == UInt8(ascii: "*") { return .any }
        var tags: [Substring] = []
        while true {
            trimLeadingSpaces(&rest)
            while rest.first == UInt8(ascii: ",") {
                rest.removeFirst()
                trimLeadingSpaces(&rest)
            }
            if rest.isEmpty { break }
            guard let (tag, _, remaining) = entityTag(rest) else { return nil }
            tags.append(Substring(tag))
            rest = remaining
            trimLeadingSpaces(&rest)
            guard rest.isEmpty || rest.first == UInt8(ascii: ",") else { return nil }
        }
        return tags.isEmpty ? nil : .tags(tags)
    }

    /// Parses one entity-tag at the start of `text`: returns its opaque tag (without quotes), whether it is weak,
    /// and the rest of the text.
    static func entityTag(_ text: Bytes) -> (tag: Bytes, weak: Bool, rest: Bytes)? {
        var rest = text
        var weak = false
        if rest.starts(with: "W/".utf8) {
            weak = true
            rest = rest.dropFirst(2)
        }
        guard rest.first == UInt8(ascii: "\"") else { return nil }
        rest = rest.dropFirst()
        guard let close = rest.firstIndex(of: UInt8(ascii: "\"")) else { return nil }
        let tag = rest[..<close]
        // etagc = %x21 / %x23-7E / obs-text
        guard tag.allSatisfy({ $0 == 0x21 || ($0 >= 0x23 && $0 != 0x7f) }) else { return nil }
        return (tag, weak, rest[rest.index(after: close)...])
    }

    /// The `If-Range` outcome for a representation with strong opaque tag `tag`: true when the range may be
    /// served. A date (we send no Last-Modified), a weak tag or another tag all mean "send the full body".
    static func ifRangeMatches(_ value: Substring, tag: Substring) -> Bool {
        var text = value.utf8
        trimSpaces(&text)
        guard let (candidate, weak, rest) = entityTag(text), !weak, rest.isEmpty else {
            return false
        }
        return candidate.elementsEqual(tag.utf8)
    }

    /// Whether `Accept-Encoding` allows gzip: `gzip`/`x-gzip` with q > 0, or `*` with q > 0 when gzip is not
    /// listed.
    static func acceptsGzip(_ value: Substring) -> Bool {
        var gzip: Bool?
        var star: Bool?
        for member in value.utf8.split(separator: UInt8(ascii: ",")) {
            var parts = member.split(separator: UInt8(ascii: ";"))[...]
            guard var coding = parts.popFirst() else { continue }
            trimSpaces(&coding)
            var allowed = true
            for parameter in parts {
                var p = parameter
                trimSpaces(&p)
                if p.count >= 2, p.first.map(lower) == UInt8(ascii: "q"), p.dropFirst().first == UInt8(ascii: "=") {
                    allowed = (Double(Substring(p.dropFirst(2))) ?? 1) > 0
                }
            }
            if equalsIgnoringCase(coding, "gzip") || equalsIgnoringCase(coding, "x-gzip") {
                gzip = allowed
            } else if coding.count == 1 && coding.first == UInt8(ascii: "*") {
                star = allowed
            }
        }
        return gzip ?? star ?? false
    }

    static func lower(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
    }

    /// ASCII case-insensitive comparison with a lowercase `word`.
    static func equalsIgnoringCase(_ bytes: Bytes, _ word: StaticString) -> Bool {
        let expected = UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount)
        return bytes.count == expected.count && zip(bytes, expected).allSatisfy { lower($0) == $1 }
    }

    static func isSpace(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }

    static func trimLeadingSpaces(_ bytes: inout Bytes) {
        while let first = bytes.first, isSpace(first) { bytes.removeFirst() }
    }

    static func trimSpaces(_ bytes: inout Bytes) {
        trimLeadingSpaces(&bytes)
        while let last = bytes.last, isSpace(last) { bytes.removeLast() }
    }
}
