/// `text` escaped for XML or HTML element content and quoted attribute values: `&`, `<`, `>`, `"` and `'` become
/// entities. `apostrophe` is the entity for `'`: `&#39;` (the default) reads the same in HTML and XML; XML also
/// has `&apos;`.
///
/// ```swift
/// markupEscaped("Tom's <b>")                        // "Tom&#39;s &lt;b&gt;"
/// markupEscaped("Tom's", apostrophe: "&apos;")      // "Tom&apos;s"
/// ```
public func markupEscaped(_ text: String, apostrophe: String = "&#39;") -> String {
    var escaped = ""
    escaped.reserveCapacity(text.utf8.count)
    for character in text {
        switch character {
        case "&": escaped += "&amp;"
        case "<": escaped += "&lt;"
        case ">": escaped += "&gt;"
        case "\"": escaped += "&quot;"
        case "'": escaped += apostrophe
        default: escaped.append(character)
        }
    }
    return escaped
}
