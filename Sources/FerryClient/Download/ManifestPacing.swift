import Foundation

/// What a manifest response says about when to ask again: the wait the server applied to a long-poll
/// (`Preference-Applied: wait=N`, RFC 7240 §3) and `Retry-After` in seconds.
///
/// ```swift
/// let pacing = ManifestPacing(TransportResponseHead(status: 304, headers: ["Preference-Applied": "wait=30"]))
/// pacing.waitApplied  // 30
/// ```
struct ManifestPacing: Sendable, Equatable {
    var waitApplied: Int?
    var retryAfter: Int?

    init(waitApplied: Int? = nil, retryAfter: Int? = nil) {
        self.waitApplied = waitApplied
        self.retryAfter = retryAfter
    }

    init(_ head: TransportResponseHead) {
        waitApplied = head.header("Preference-Applied").flatMap(Self.appliedWait)
        retryAfter = head.header("Retry-After").flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }.flatMap {
            $0 >= 0 ? $0 : nil
        }
    }

    /// The seconds of `wait=N` in a `Preference-Applied` value (the other preferences it lists are skipped).
    static func appliedWait(_ value: String) -> Int? {
        for preference in value.split(separator: ",") {
            let parts = preference.split(separator: ";")[0].split(separator: "=", maxSplits: 1)
            guard parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces).lowercased() == "wait" else {
                continue
            }
            return Int(parts[1].trimmingCharacters(in: .whitespaces).trimmingCharacters(in: ["\""]))
        }
        return nil
    }

    /// The whole seconds sent as `Prefer: wait=N` for `duration`: rounded up, 1 to 60 (the most a Ferry server
    /// waits); nil for no wait.
    static func waitSeconds(_ duration: Duration?) -> Int? {
        guard let duration, duration > .zero else { return nil }
        let (seconds, attoseconds) = duration.components
        return Int(min(60, max(1, seconds + (attoseconds > 0 ? 1 : 0))))
    }
}
