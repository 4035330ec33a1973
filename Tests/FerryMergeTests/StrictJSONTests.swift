import FerryCore
import Foundation
import Testing

@testable import FerryMerge

/// The strict pass that runs before a change batch is decoded: RFC 8259 grammar plus duplicate keys, depth,
/// UTF-8, NUL and number ranges. Pure: no server, no database.
@Suite struct StrictJSONTests {
    func check(_ text: String, depth: Int = 16) -> StrictJSON.Failure? {
        check(Data(text.utf8), depth: depth)
    }

    func check(_ bytes: Data, depth: Int = 16) -> StrictJSON.Failure? {
        do {
            try StrictJSON.check(bytes, maxDepth: depth)
            return nil
        } catch {
            return error
        }
    }

    @Test func acceptsJSON() {
        let good = [
            #"{}"#, #"[]"#, #" {"a" : [1, -2.5e3, 0, 0.5, true, false, null, "x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"]} "#,
            #"{"a":{"b":{"a":1}},"b":[{"a":1},{"a":2}]}"#, #""Växjö""#, "9223372036854775807", "-9223372036854775808",
            "1.7976931348623157e308", "1e-400", #"{"a":[],"b":{}}"#,
        ]
        for text in good { #expect(check(text) == nil, "\(text)") }
        let batch = try! JSONEncoder().encode(
            ChangeBatch(
                clientId: "d", sentAt: "2026-11-21T10:00:00.000Z",
                changes: [
                    Change(
                        id: "a", table: "trips", op: .update, key: ["id": .int(1)],
                        values: ["name": .string("x"), "n": .double(1.5)],
                        editedAt: "2026-11-21T10:00:00.000Z", baseUpdatedAt: nil)
                ]))
        #expect(check(batch, depth: 4) == nil)
    }

    @Test func refusesDuplicateKeys() {
        #expect(check(#"{"op":"delete","op":"update"}"#)?.reason.contains("duplicate key \"op\"") == true)
        #expect(check(#"{"op":1,"\u006fp":2}"#)?.reason.contains("duplicate key") == true)
        #expect(check(#"[{"a":1},{"b":{"c":1,"c":1}}]"#)?.reason.contains("duplicate key \"c\"") == true)
        // The same key in sibling objects is fine.
        #expect(check(#"[{"a":1},{"a":1}]"#) == nil)
    }

    @Test func refusesDeepNestingWithoutRecursion() {
        #expect(
            check(String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000))?.reason.contains(
                "deeper than 16") == true)
        #expect(
            check(String(repeating: #"{"a":"#, count: 10_000) + "1" + String(repeating: "}", count: 10_000))?.reason
                .contains("deeper") == true)
        #expect(check("[[[1]]]", depth: 3) == nil)
        #expect(check("[[[[1]]]]", depth: 3) != nil)
    }

    @Test func refusesBadStrings() {
        #expect(check(Data([0x22, 0xC3, 0x28, 0x22]))?.reason == "the body is not UTF-8")  // bad continuation
        #expect(check(Data([0x22, 0xC0, 0xAF, 0x22]))?.reason == "the body is not UTF-8")  // overlong '/'
        #expect(check(Data([0x22, 0xED, 0xA0, 0x80, 0x22]))?.reason == "the body is not UTF-8")  // encoded surrogate
        #expect(check(Data([0x22, 0xF4, 0x90, 0x80, 0x80, 0x22]))?.reason == "the body is not UTF-8")  // above U+10FFFF
        #expect(check(Data([0x22, 0xE2, 0x82]))?.reason == "the body is not UTF-8")  // truncated
        #expect(check(Data([0x22, 0x61, 0x00, 0x22]))?.reason == "a string holds NUL")
        #expect(check(#""a\u0000b""#)?.reason.contains("NUL") == true)
        #expect(check(#""\ud800""#)?.reason.contains("lone surrogate") == true)
        #expect(check(#""\udc00x""#)?.reason.contains("lone surrogate") == true)
        #expect(check(#""\ud800\u0041""#)?.reason.contains("lone surrogate") == true)
        #expect(check("\"a\tb\"")?.reason.contains("control character") == true)
        #expect(check(#""\x""#)?.reason.contains("unknown escape") == true)
        #expect(check(#""\u12g4""#)?.reason.contains("four hex digits") == true)
        #expect(check(#""abc"#)?.reason.contains("ends inside a string") == true)
        #expect(check(Data([0x7B, 0xFF, 0x7D])) != nil)  // a non-ASCII byte outside a string
    }

    @Test func refusesNumbersOutOfRange() {
        #expect(check("9223372036854775808")?.reason.contains("outside the 64-bit range") == true)
        #expect(check("-9223372036854775809")?.reason.contains("outside the 64-bit range") == true)
        #expect(check(#"{"v":1e400}"#)?.reason.contains("outside the range of a double") == true)
        #expect(check(#"{"v":-1.8e308}"#)?.reason.contains("outside the range of a double") == true)
        #expect(check("0." + String(repeating: "1", count: 2_000))?.reason.contains("longer than 1024") == true)
        for bad in ["01", "-", "1.", ".5", "1e", "+1", "NaN", "Infinity", "0x10", "1.5.2"] {
            #expect(check(bad) != nil, "\(bad)")
        }
    }

    @Test func refusesOtherBadGrammar() {
        for bad in [
            "", " ", "{", "[1,]", #"{"a":1,}"#, #"{"a"}"#, #"{a:1}"#, "[1 2]", #"{"a":1}x"#, "{} {}", "tru", "nul",
            "[}", "{]", "'a'",
        ] {
            #expect(check(bad) != nil, "\(bad)")
        }
        #expect(check(#"{"a":1} x"#)?.offset == 8)
    }

    @Test func scansEightMebibytesQuickly() {
        let row =
            #"{"id":"00000000-0000-0000-0000-000000000000","table":"trips","op":"update","key":{"id":1},"values":{"name":"Växjö","n":1.5}},"#
        var text = #"{"clientId":"d","sentAt":"x","changes":["#
        while text.utf8.count < 8 << 20 { text += row }
        text.removeLast()
        text += "]}"
        let start = ContinuousClock.now
        #expect(check(text) == nil)
        // Linear, not quadratic: a quadratic scan of 8 MiB takes hours; the speed itself is for benchmarks
        #expect(ContinuousClock.now - start < .seconds(60))
    }
}
