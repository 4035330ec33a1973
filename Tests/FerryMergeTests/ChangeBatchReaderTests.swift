import FerryCore
import Foundation
import Testing

@testable import FerryMerge

/// The direct reader of change batches gives what JSONDecoder gives, and leaves every other body to JSONDecoder.
@Suite struct ChangeBatchReaderTests {
    static func read(_ text: String) -> ChangeBatch? {
        Array(text.utf8).withUnsafeBufferPointer { ChangeBatchReader.read($0) }
    }

    static func decoded(_ text: String) throws -> ChangeBatch {
        try JSONDecoder().decode(ChangeBatch.self, from: Data(text.utf8))
    }

    @Test(arguments: [
        // As scripts/lib/outbox_http.py sends them: ASCII escapes for ä and ö.
        #"{"clientId": "d1", "sentAt": "2026-11-21T10:00:00.000Z", "changes": [{"id": "c1", "table": "trips", "op": "update", "key": {"id": 7}, "values": {"seats": 3, "name": "V\u00e4xj\u00f6 \"K\" \\ \/ \n\t"}, "editedAt": "2026-11-21T09:30:00.000Z", "baseUpdatedAt": "2026-11-21T09:00:00.000Z"}]}"#,
        // Raw UTF-8, a surrogate pair, null, booleans, negative numbers, bases, null baseUpdatedAt, extra keys.
        #"{"extra":[{"a":"]}"},[1,2]],"changes":[{"op":"insert","id":"c2","table":"trips","key":{"id":"x-1"},"values":{"name":"Växjö 😀 \ud83d\ude00","flag":true,"off":false,"gone":null,"n":-42,"z":0},"editedAt":"e","baseUpdatedAt":null,"meta":{"k":[true,null,"}"]},"base":{"n":-40}},{"id":"c3","table":"t","op":"delete","key":{"id":1},"values":{},"editedAt":"e","base":null}],"clientId":"d2","sentAt":"s"}"#,
        #"{"clientId":"d","sentAt":"s","changes":[]}"#,
        "  {\n\t\"clientId\" : \"d\" ,\r\n \"sentAt\":\"s\", \"changes\" : [ ] }  ",
    ])
    func readsWhatJSONDecoderDecodes(body: String) throws {
        let read = try #require(Self.read(body))
        #expect(read == (try Self.decoded(body)))
    }

    @Test(arguments: [
        // Numbers with a fraction or an exponent are JSONDecoder's to read.
        #"{"clientId":"d","sentAt":"s","changes":[{"id":"c","table":"t","op":"update","key":{"id":1},"values":{"x":1.5},"editedAt":"e"}]}"#,
        #"{"clientId":"d","sentAt":"s","changes":[{"id":"c","table":"t","op":"update","key":{"id":1},"values":{"x":1e3},"editedAt":"e"}]}"#,
        // Mistyped, missing or unknown: JSONDecoder answers with its error.
        #"{"clientId":"d","sentAt":"s","changes":[{"id":"c","table":"t","op":"upsert","key":{"id":1},"values":{},"editedAt":"e"}]}"#,
        #"{"clientId":"d","sentAt":"s","changes":[{"id":"c","table":"t","op":"update","key":{"id":[1]},"values":{},"editedAt":"e"}]}"#,
        #"{"clientId":"d","sentAt":"s","changes":[{"id":"c","table":"t","op":"update","key":{"id":1},"values":{},"editedAt":5}]}"#,
        #"{"clientId":"d","sentAt":"s","changes":[{"id":"c","table":"t","op":"update","key":{"id":1},"editedAt":"e"}]}"#,
        #"{"clientId":null,"sentAt":"s","changes":[]}"#,
        #"{"sentAt":"s","changes":[]}"#,
        #"[]"#,
    ])
    func leavesEverythingElseToJSONDecoder(body: String) {
        #expect(Self.read(body) == nil)
    }

    @Test func requestsOfThePlainShapeAndOthersDecodeAlike() throws {
        // Given: one body the reader takes and one it leaves (a fraction), both through ChangeRequest.
        let plain =
            #"{"clientId":"d","sentAt":"2026-11-21T10:00:00.000Z","changes":[{"id":"c","table":"t","op":"update","key":{"id":1},"values":{"x":2},"editedAt":"e"}]}"#
        let fraction = plain.replacingOccurrences(of: #""x":2"#, with: #""x":2.5"#)
        // Then: each decodes to what JSONDecoder makes of it.
        #expect(try ChangeRequest.decode(Data(plain.utf8)) == (try Self.decoded(plain)))
        #expect(try ChangeRequest.decode(Data(fraction.utf8)) == (try Self.decoded(fraction)))
        #expect(try ChangeRequest.decode(Data(fraction.utf8)).changes[0].values["x"] == .double(2.5))
    }
}
