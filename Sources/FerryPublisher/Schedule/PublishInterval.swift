import FerryCore
import Foundation

/// A duration on the command line (how often a schedule publishes, how long answers are kept): a whole number
/// followed by `s`, `m`, `h` or `d` (`30s`, `15m`, `2h`, `30d`), at most a year.
///
/// ```swift
/// let every = try PublishInterval(parsing: "15m")
/// every.seconds   // 900
/// ```
public struct PublishInterval: Sendable, Equatable, CustomStringConvertible {
    /// The interval in whole seconds (at least 1).
    public let seconds: Int

    public init(seconds: Int) {
        precondition(seconds >= 1, "an interval is at least one second")
        self.seconds = seconds
    }

    /// Parses `30s`, `15m`, `2h`, `30d`; throws `.badInput` with the accepted forms otherwise.
    public init(parsing text: String) throws {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let bad = FerryError(
            .badInput,
            "'\(text)' is not a duration: write a whole number followed by s, m, h or d, e.g. 30s, 15m, 2h or 30d",
            key: "every")
        guard let unit = trimmed.last, let number = Int(trimmed.dropLast()), number >= 1 else { throw bad }
        let multiplier: Int
        switch unit {
        case "s": multiplier = 1
        case "m": multiplier = 60
        case "h": multiplier = 3600
        case "d": multiplier = 86_400
        default: throw bad
        }
        let (total, overflow) = number.multipliedReportingOverflow(by: multiplier)
        guard !overflow, total <= 366 * 24 * 3600 else {
            throw FerryError(.badInput, "'\(text)' is longer than a year; choose a shorter interval", key: "every")
        }
        seconds = total
    }

    /// As a `Duration`.
    public var duration: Duration { .seconds(seconds) }

    /// The shortest canonical form (`900` seconds → `15m`).
    public var description: String {
        if seconds % 86_400 == 0 { return "\(seconds / 86_400)d" }
        if seconds % 3600 == 0 { return "\(seconds / 3600)h" }
        if seconds % 60 == 0 { return "\(seconds / 60)m" }
        return "\(seconds)s"
    }
}
