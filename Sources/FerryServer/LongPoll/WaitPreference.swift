import Foundation
import HTTPTypes

/// The `wait` preference of a request's `Prefer` header (RFC 7240 §4.3): how many seconds the client is willing to
/// wait for a manifest newer than the one its `If-None-Match` names. The server waits at most ``maxSeconds``; a larger
/// value is clamped to it.
///
/// As RFC 7240 §2 says, a preference the server cannot read is ignored: a `Prefer` header with no `wait`, a `wait`
/// whose value is not delta-seconds (`1*DIGIT`, quoted or not), or a header that does not parse, is as if absent.
/// When `wait` appears more than once, the first one counts (§2).
///
/// ```swift
/// WaitPreference("wait=30")?.seconds          // 30
/// WaitPreference("respond-async, wait=600")?.seconds  // 60
/// WaitPreference("wait=soon")                 // nil
/// ```
struct WaitPreference: Equatable, Sendable {
    /// The longest a request waits, whatever it asks for.
    static let maxSeconds = 60

    /// The applied wait, `0...maxSeconds`.
    let seconds: Int

    /// `Preference-Applied: wait=<seconds>`.
    var applied: String { "wait=\(seconds)" }

    /// Reads the `wait` preference of a `Prefer` header value (several header fields joined with `,`); nil when
    /// there is none that can be read.
    init?(_ header: String?) {
        guard let header else { return nil }
        for preference in Self.split(header[...], on: UInt8(ascii: ",")) {
            // preference = token [ BWS "=" BWS word ] *( OWS ";" [ OWS parameter ] ): only the first part matters
            guard let first = Self.split(preference, on: UInt8(ascii: ";")).first else { continue }
            let parts = first.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = parts[0].trimmingCharacters(in: [" ", "\t"])
            guard name.lowercased() == "wait" else { continue }
            guard parts.count == 2 else { return nil }
            var value = parts[1].trimmingCharacters(in: [" ", "\t"])[...]
            if value.count >= 2, value.first == "\"", value.last == "\"" { value = value.dropFirst().dropLast() }
            guard !value.isEmpty, value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
                return nil
            }
            // A value too long for Int is still a valid delta-seconds: it asks for more than the maximum.
            seconds = min(Int(value) ?? Self.maxSeconds, Self.maxSeconds)
            return
        }
        return nil
    }

    /// Splits `text` on `separator` outside quoted strings; empty elements are dropped (RFC 9110 §5.6.1 lists).
    static func split(_ text: Substring, on separator: UInt8) -> [Substring] {
        var parts: [Substring] = []
        var start = text.startIndex
        var quoted = false
        var escaped = false
        var index = text.startIndex
        while index < text.endIndex {
            let byte = text.utf8[index]
            if quoted {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    quoted = false
                }
            } else if byte == UInt8(ascii: "\"") {
                quoted = true
            } else if byte == separator {
                parts.append(text[start..<index])
                start = text.utf8.index(after: index)
            }
            index = text.utf8.index(after: index)
        }
        parts.append(text[start...])
        return parts.filter { !$0.allSatisfy { $0 == " " || $0 == "\t" } }
    }
}

extension HTTPField.Name {
    /// `Prefer` (RFC 7240): the manifest long-poll reads its `wait` preference.
    static let prefer = HTTPField.Name("Prefer")!
    /// `Preference-Applied` (RFC 7240 §3): says which wait the server applied.
    static let preferenceApplied = HTTPField.Name("Preference-Applied")!
}
