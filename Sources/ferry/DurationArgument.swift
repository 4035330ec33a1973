import ArgumentParser
import FerryCore
import Foundation

extension Duration {
    /// The transform of every duration flag: `500ms`, `30s`, `15m`, `2h`, `30d`, or a bare number of seconds
    /// (``Duration/init(parsing:key:)``), within `range`. Out of range, or negative, is a usage error that says
    /// `expected` (ArgumentParser names the flag).
    ///
    /// ```swift
    /// @Option(transform: Duration.argument(in: .seconds(1) ... .longestSetting, expected: "at least 1s"))
    /// var every: Duration?
    /// ```
    static func argument(
        in range: ClosedRange<Duration> = .zero ... .longestSetting, expected: String? = nil
    ) -> @Sendable (String) throws -> Duration {
        { text in
            let outOfRange = ValidationError(
                "must be \(expected ?? "\(range.lowerBound.shortDescription) to \(range.upperBound.shortDescription)")")
            if text.trimmingCharacters(in: .whitespaces).hasPrefix("-") { throw outOfRange }
            let duration: Duration
            do {
                duration = try Duration(parsing: text)
            } catch let error as FerryError {
                // The library's error names its own key; ArgumentParser names the flag, so only the message goes on.
                throw ValidationError(error.message)
            }
            guard range.contains(duration) else { throw outOfRange }
            return duration
        }
    }
}
