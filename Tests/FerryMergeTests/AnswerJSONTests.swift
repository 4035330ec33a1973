import FerryCore
import Foundation
import Testing

@testable import FerryMerge

/// The hand-written JSON of change answers decodes to the very answers, and is strict JSON (no I/O).
@Suite struct AnswerJSONTests {
    static let answers: [ChangeResult] = [
        ChangeResult(
            id: "7a1f6c1e-2d7b-4c55-9a7e-0c5d7e1b0001", status: .applied,
            row: [
                "id": .string("7a1f6c1e"), "name": .string("Växjö-Kalmar \"express\" \\ / 🚌"),
                "passengers": .int(-9_223_372_036_854_775_808),
                "bags": .int(9_223_372_036_854_775_807), "price": .double(1.5), "tiny": .double(1e-7),
                "huge": .double(1.7976931348623157e308),
                "flag": .bool(true), "off": .bool(false), "notes": .null,
                "control": .string("tab\tnewline\nreturn\rbell\u{07}nul-free\u{1F}end"),
                "updatedAt": .string("2026-11-21T10:00:00.000Z"),
            ], message: nil),
        ChangeResult(
            id: "r", status: .rejected, row: ["id": .int(1)], message: "the server's row is newer (edited \"later\")"),
        ChangeResult(id: "g", status: .gone, row: nil, message: "deleted"),
        ChangeResult(id: "i\u{1}d", status: .invalid, row: nil, message: nil),
        ChangeResult(id: "f", status: .forbidden, row: [:], message: "out of scope"),
    ]

    // (A whole Double such as 3.0 is left out: JSONValue reads any integral JSON number back as .int, from
    // JSONEncoder's output too.)
    @Test func eachAnswerDecodesToItself() throws {
        for answer in Self.answers {
            let bytes = AnswerJSON.encode(answer)
            try StrictJSON.check(Data(bytes), maxDepth: 4)
            #expect(try JSONDecoder().decode(ChangeResult.self, from: Data(bytes)) == answer)
            // `row` is always present, as JSON null when there is no row (as JSONEncoder writes it).
            let object = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
            #expect(object.keys.contains("row"))
            #expect(object.keys.contains("message") == (answer.message != nil))
        }
    }

    @Test func integersAreWrittenAsSwiftPrintsThem() {
        for value: Int64 in [0, 7, -7, 9, 10, -10, 99, 100, 1_234_567_890, .max, .min, .max - 1, .min + 1] {
            var out: [UInt8] = Array("x".utf8)
            AnswerJSON.integer(value, to: &out)
            #expect(String(decoding: out, as: UTF8.self) == "x\(value)")
        }
    }

    @Test func aWholeResponseDecodesToItself() throws {
        let results = ChangeResults(results: Self.answers)
        let bytes = AnswerJSON.encode(results)
        try StrictJSON.check(Data(bytes), maxDepth: 4)
        #expect(try JSONDecoder().decode(ChangeResults.self, from: Data(bytes)) == results)
        #expect(String(decoding: AnswerJSON.encode(ChangeResults(results: [])), as: UTF8.self) == #"{"results":[]}"#)
    }
}
