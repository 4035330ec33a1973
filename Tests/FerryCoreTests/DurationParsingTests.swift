import FerryCore
import Testing

/// The one duration grammar of every setting and duration flag (`--every`, `--debounce`, `--object-grace`,
/// `--drain-timeout`, ...).
@Suite("Duration parsing")
struct DurationParsingTests {
    @Test(
        "a number and a unit, or bare seconds",
        arguments: [
            ("500ms", Duration.milliseconds(500)), ("30s", .seconds(30)), ("15m", .seconds(900)),
            ("2h", .seconds(7200)), ("30d", .seconds(30 * 86_400)), ("0s", .zero), ("0", .zero),
            ("1.5s", .milliseconds(1500)), ("0.25", .milliseconds(250)), ("30", .seconds(30)), (" 5m ", .seconds(300)),
            ("366d", .seconds(366 * 86_400)),
        ])
    func parses(_ text: String, _ expected: Duration) throws {
        #expect(try Duration(parsing: text) == expected)
    }

    @Test(
        "anything else is a bad input naming the key and the accepted forms",
        arguments: ["", "m", "15x", "-5m", "15 m", "1e3s", ".5s", "5.s", "1..2s", "inf", "nan", "367d", "9999999h"])
    func refuses(_ text: String) {
        do {
            _ = try Duration(parsing: text, key: "every")
            Issue.record("'\(text)' was accepted")
        } catch let error as FerryError {
            #expect(error.code == .badInput, "'\(text)'")
            #expect(error.key == "every", "'\(text)'")
            #expect(
                error.message.contains("s, m or h, or d for days and ms for milliseconds")
                    || error.message.contains("longer than a year"))
        } catch {
            Issue.record("'\(text)': \(error)")
        }
    }

    @Test("the short description is the largest exact unit, and parses back")
    func shortDescription() throws {
        let cases: [(Duration, String)] = [
            (.seconds(900), "15m"), (.seconds(7200), "2h"), (.seconds(172_800), "2d"), (.milliseconds(500), "500ms"),
            (.milliseconds(1500), "1500ms"), (.zero, "0s"), (.seconds(90), "90s"),
        ]
        for (duration, text) in cases {
            #expect(duration.shortDescription == text)
            #expect(try Duration(parsing: text) == duration)
        }
        #expect(Duration.milliseconds(1500).inSeconds == 1.5)
    }
}
