import Foundation

extension Duration {
    /// The longest duration a setting takes: a year (366 days).
    public static let longestSetting: Duration = .seconds(366 * 86_400)

    /// Parses a duration as settings and command lines write it: a number followed by `ms`, `s`, `m`, `h` or `d`
    /// (`500ms`, `30s`, `15m`, `2h`, `30d`, `1.5s`), or a bare number of seconds (`30`, `0.5`). At most a year;
    /// never negative. Throws `FerryError.Code.badInput` naming `key`, with the accepted forms.
    ///
    /// ```swift
    /// let every = try Duration(parsing: "15m")        // .seconds(900)
    /// let debounce = try Duration(parsing: "500ms")   // .milliseconds(500)
    /// ```
    public init(parsing text: String, key: String? = nil) throws {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let bad = FerryError(
            .badInput,
            "'\(text)' is not a duration: write a number followed by s, m or h, or d for days and ms for milliseconds, "
                + "e.g. 30s, 15m, 2h or 30d, or 500ms",
            key: key)
        let units: [(suffix: String, milliseconds: Double)] = [
            ("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000),
        ]
        let unit = units.first { trimmed.hasSuffix($0.suffix) } ?? ("", 1000)
        let number = trimmed.dropLast(unit.suffix.count)
        // Digits with at most one decimal point: no sign, no exponent, no "inf" or "nan".
        guard !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
            number.filter({ $0 == "." }).count <= 1, number.first != ".", number.last != ".",
            let value = Double(number)
        else { throw bad }
        let milliseconds = (value * unit.milliseconds).rounded()
        guard milliseconds <= Double(Duration.longestSetting.components.seconds) * 1000 else {
            throw FerryError(.badInput, "'\(text)' is longer than a year; choose a shorter duration", key: key)
        }
        self = .milliseconds(Int64(milliseconds))
    }

    /// The duration in seconds, as a `Double`.
    ///
    /// ```swift
    /// Duration.milliseconds(1500).inSeconds   // 1.5
    /// ```
    public var inSeconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }

    /// The shortest exact form in one unit, as ``init(parsing:key:)`` reads it back: `15m`, `2d`, `500ms`, `0s`.
    ///
    /// ```swift
    /// Duration.seconds(7200).shortDescription   // "2h"
    /// ```
    public var shortDescription: String {
        let milliseconds = Int64((inSeconds * 1000).rounded())
        if milliseconds == 0 { return "0s" }
        for (suffix, size) in [("d", Int64(86_400_000)), ("h", 3_600_000), ("m", 60_000), ("s", 1000)]
        where milliseconds % size == 0 {
            return "\(milliseconds / size)\(suffix)"
        }
        return "\(milliseconds)ms"
    }
}
