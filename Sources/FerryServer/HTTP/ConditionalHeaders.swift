/// Parsing of the request headers that select what to send: `If-None-Match`, `If-Range`, `Accept-Encoding`
/// (RFC 9110 §13.1.2, §13.1.5, §12.5.3).
enum ConditionalHeaders {
    /// An `If-None-Match` value: `*` or a list of entity tags, compared weakly (the opaque tags only).
    enum NoneMatch {
        case any
        case tags([Substring])
    }

    /// Parses `If-None-Match`; nil when malformed (then the precondition is ignored, as for an absent header).
    static func noneMatch(_ value: Substring) -> NoneMatch? {
        var text = value
        trimSpaces(&text)
        if text == "*" { return .any }
        var tags: [Substring] = []
        var rest = text[...]
        while true {
            trimSpaces(&rest)
            while rest.first == "," {
                rest.removeFirst()
                trimSpaces(&rest)
            }
            if rest.isEmpty { break }
            guard let (tag, _, remaining) = entityTag(rest) else { return nil }
            tags.append(tag)
            rest = remaining
            trimSpaces(&rest)
            guard rest.isEmpty || rest.first == "," else { return nil }
        }
        return tags.isEmpty ? nil : .tags(tags)
    }

    /// Parses one entity-tag at the start of `text`: returns its opaque tag (without quotes), whether it is weak,
    /// and the rest of the text.
    static func entityTag(_ text: Substring) -> (tag: Substring, weak: Bool, rest: Substring)? {
        var rest = text
        var weak = false
        if rest.hasPrefix("W/") {
            weak = true
            rest = rest.dropFirst(2)
        }
        guard rest.first == "\"" else { return nil }
        rest = rest.dropFirst()
        guard let close = rest.firstIndex(of: "\"") else { return nil }
        let tag = rest[..<close]
        // etagc = %x21 / %x23-7E / obs-text
        guard tag.utf8.allSatisfy({ $0 == 0x21 || ($0 >= 0x23 && $0 != 0x7f) }) else { return nil }
        return (tag, weak, rest[rest.index(after: close)...])
    }

    /// The `If-Range` outcome for a representation with strong opaque tag `tag`: true when the range may be
    /// served. A date (we send no Last-Modified), a weak tag or another tag all mean "send the full body".
    static func ifRangeMatches(_ value: Substring, tag: Substring) -> Bool {
        var text = value
        trimSpaces(&text)
        guard let (candidate, weak, rest) = entityTag(text), !weak, rest.allSatisfy({ $0 == " " || $0 == "\t" }) else {
            return false
        }
        return candidate == tag
    }

    /// Whether `Accept-Encoding` allows gzip: `gzip`/`x-gzip` with q > 0, or `*` with q > 0 when gzip is not
    /// listed.
    static func acceptsGzip(_ value: Substring) -> Bool {
        var gzip: Bool?
        var star: Bool?
        for member in value.split(separator: ",") {
            let parts = member.split(separator: ";")
            guard var coding = parts.first else { continue }
            trimSpaces(&coding)
            var allowed = true
            for parameter in parts.dropFirst() {
                var p = parameter
                trimSpaces(&p)
                if p.lowercased().hasPrefix("q=") {
                    allowed = (Double(p.dropFirst(2)) ?? 1) > 0
                }
            }
            switch coding.lowercased() {
            case "gzip", "x-gzip": gzip = allowed
            case "*": star = allowed
            default: break
            }
        }
        return gzip ?? star ?? false
    }
}
