import FerryCore
import FerryMerge
import FerryPostgres
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import FerryServer

/// Hostile bodies against `POST /v1/datasets/{dataset}/changes`, on the live server over a real PostgreSQL. A
/// malformed body is a 4xx; a bad change inside a well-formed batch gets its own `invalid` answer. Either way no
/// row of the user's tables is written.
extension ChangesRouteTests {
    static let sentAt = "2026-11-21T10:00:00.000Z"
    static let edited = "2026-11-21T09:30:00.000Z"

    /// One change as JSON text, with any part replaced by the caller's raw text.
    static func changeJSON(
        id: String = #""c-1""#, table: String = #""trips""#, op: String = #""op":"update""#, key: String = #"{"id":1}"#,
        values: String = #"{"seats":9}"#
    ) -> String {
        #"{"id":\#(id),"table":\#(table),\#(op),"key":\#(key),"values":\#(values),"editedAt":"\#(edited)","baseUpdatedAt":"\#(base)"}"#
    }

    static func batchJSON(_ changes: String...) -> String {
        #"{"clientId":"device-1","sentAt":"\#(sentAt)","changes":[\#(changes.joined(separator: ","))]}"#
    }

    /// The user's table holds exactly the seeded trip, unchanged, and nothing was deleted or remembered.
    func expectNothingWritten(_ f: MergeFixture, storedAnswers: Int = 0, _ label: String = "") throws {
        #expect(try f.count("SELECT count(*) FROM trips") == 1, "\(label)")
        #expect(
            try f.trip(1) == ["Växjö-Kalmar", "0", "0", "2026-11-21T09:00:00.000000Z", "2026-11-21T09:00:00.000000Z"],
            "\(label)")
        #expect(try f.count("SELECT count(*) FROM ferry_tombstones") == 0, "\(label)")
        #expect(try f.count("SELECT count(*) FROM ferry_changes") == storedAnswers, "\(label)")
        #expect(
            try f.count("SELECT count(*) FROM ferry_changes WHERE result::jsonb->>'status' <> 'invalid'") == 0,
            "\(label)")
    }

    @Test func malformedBodiesAre400AndWriteNothing() async throws {
        try await withServer { f, client in
            try f.seed(id: 1, created: Self.base, updated: Self.base)
            let deep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
            var badUTF8 = Array(Self.batchJSON(Self.changeJSON(values: #"{"name":"AB"}"#)).utf8)
            let at = badUTF8.firstIndex(of: UInt8(ascii: "A"))!
            badUTF8.replaceSubrange(at...(at + 1), with: [0xC3, 0x28])  // a lead byte without its continuation
            var rawNUL = Array(Self.batchJSON(Self.changeJSON(values: #"{"name":"AB"}"#)).utf8)
            rawNUL[rawNUL.firstIndex(of: UInt8(ascii: "A"))!] = 0
            let cases: [(String, [UInt8], String)] = [
                ("nested 10,000 deep", Array(deep.utf8), "deeper than 16 levels"),
                (
                    "nested 10,000 deep in values",
                    Array(Self.batchJSON(Self.changeJSON(values: #"{"seats":\#(deep)}"#)).utf8), "deeper"
                ),
                ("invalid UTF-8 in a value", badUTF8, "not UTF-8"),
                ("NUL byte in a value", rawNUL, "NUL"),
                (
                    "escaped NUL in a value",
                    Array(Self.batchJSON(Self.changeJSON(values: #"{"name":"a\u0000b"}"#)).utf8), "NUL"
                ),
                ("escaped NUL in a change id", Array(Self.batchJSON(Self.changeJSON(id: #""c\u0000""#)).utf8), "NUL"),
                (
                    "lone surrogate in a value",
                    Array(Self.batchJSON(Self.changeJSON(values: #"{"name":"\ud800"}"#)).utf8), "surrogate"
                ),
                (
                    "integer beyond Int64",
                    Array(Self.batchJSON(Self.changeJSON(values: #"{"seats":9223372036854775808}"#)).utf8), "64-bit"
                ),
                (
                    "number beyond Double", Array(Self.batchJSON(Self.changeJSON(values: #"{"seats":1e400}"#)).utf8),
                    "double"
                ),
                (
                    "two op keys", Array(Self.batchJSON(Self.changeJSON(op: #""op":"delete","op":"update""#)).utf8),
                    #"duplicate key \"op\""#
                ),
                (
                    "two op keys, one escaped",
                    Array(Self.batchJSON(Self.changeJSON(op: #""op":"delete","\u006fp":"update""#)).utf8),
                    "duplicate key"
                ),
                (
                    "two id keys in key", Array(Self.batchJSON(Self.changeJSON(key: #"{"id":1,"id":2}"#)).utf8),
                    #"duplicate key \"id\""#
                ),
                (
                    "two clientId keys",
                    Array(#"{"clientId":"a","clientId":"b","sentAt":"\#(Self.sentAt)","changes":[]}"#.utf8),
                    "duplicate key"
                ),
            ]
            for (label, body, expected) in cases {
                try await client.execute(
                    uri: "/v1/datasets/trips/changes", method: .post, body: ByteBuffer(bytes: body)
                ) { response in
                    #expect(response.status == .badRequest, "\(label)")
                    let text = String(buffer: response.body)
                    #expect(text.contains(#""code":"bad-input""#), "\(label): \(text)")
                    #expect(text.contains(expected), "\(label): \(text)")
                }
            }
            try expectNothingWritten(f)
        }
    }

    @Test func identifiersCarryingSQLAreInvalidAndWriteNothing() async throws {
        try await withServer { f, client in
            try f.seed(id: 1, created: Self.base, updated: Self.base)
            let body = Self.batchJSON(
                Self.changeJSON(id: #""t""#, table: #""x\"; DROP TABLE trips; --""#),
                Self.changeJSON(id: #""v""#, values: #"{"seats\" = 0; DROP TABLE trips; --":1}"#),
                Self.changeJSON(id: #""k""#, key: #"{"id\" OR 1=1 --":1}"#),
                Self.changeJSON(id: #""r""#, table: #""routes; DELETE FROM trips""#))
            try await client.execute(uri: "/v1/datasets/trips/changes", method: .post, body: ByteBuffer(string: body)) {
                response in
                #expect(response.status == .ok)
                let results = try JSONDecoder().decode(ChangeResults.self, from: Data(response.body.readableBytesView))
                    .results
                #expect(results.map(\.id) == ["t", "v", "k", "r"])
                #expect(results.map(\.status) == [.invalid, .invalid, .invalid, .invalid], "\(results)")
            }
            // Invalid answers are remembered (a resend gets the same answer); nothing else is written.
            try expectNothingWritten(f, storedAnswers: 4)
        }
    }

    /// The change id is the idempotency key: once answered, the same id gets the stored answer whatever the body
    /// says now, and nothing is written again (docs/http-api.md, "Changes").
    @Test func aReusedChangeIDGetsItsStoredAnswerWhateverTheBody() async throws {
        try await withServer { f, client in
            try f.seed(id: 1, created: Self.base, updated: Self.base)
            func send(_ change: String) async throws -> ChangeResult {
                try await client.execute(
                    uri: "/v1/datasets/trips/changes", method: .post, body: ByteBuffer(string: Self.batchJSON(change))
                ) { response in
                    #expect(response.status == .ok)
                    return try JSONDecoder().decode(ChangeResults.self, from: Data(response.body.readableBytesView))
                        .results[0]
                }
            }
            let first = try await send(Self.changeJSON(id: #""same""#, values: #"{"seats":1}"#))
            #expect(first.status == .applied)
            #expect(first.row?["seats"] == .int(1))
            f.clock.set("2026-11-21T10:05:00.000Z")
            let asDelete = try await send(Self.changeJSON(id: #""same""#, op: #""op":"delete""#, values: "{}"))
            let otherValue = try await send(Self.changeJSON(id: #""same""#, values: #"{"seats":7}"#))
            #expect(asDelete == first)
            #expect(otherValue == first)
            #expect(try f.trip(1)?[1] == "1")
            #expect(try f.count("SELECT count(*) FROM ferry_changes") == 1)
            #expect(try f.count("SELECT count(*) FROM ferry_tombstones") == 0)
        }
    }

    /// PostgreSQL silently skips a write the engine asked for (a BEFORE trigger that returns NULL, as an
    /// operator's audit trigger might): the engine's invariant check turns it into a 503 that says what happened,
    /// the transaction is rolled back, and no answer is stored, so the device keeps the edit and sends it again.
    @Test func aWriteThatPostgreSQLSkipsIsA503AndRecordsNothing() async throws {
        try await withServer { f, client in
            try f.seed(id: 1, created: Self.base, updated: Self.base)
            try f.pg.execute(
                """
                CREATE FUNCTION skip_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
                CREATE TRIGGER skip_trips BEFORE UPDATE ON trips FOR EACH ROW EXECUTE FUNCTION skip_write();
                """)
            let body = ByteBuffer(string: Self.batchJSON(Self.changeJSON(id: #""short""#, values: #"{"seats":5}"#)))
            try await client.execute(uri: "/v1/datasets/trips/changes", method: .post, body: body) { response in
                #expect(response.status == .serviceUnavailable)
                let text = String(buffer: response.body)
                #expect(text.contains("merge engine invariant failed for table 'trips'"), "\(text)")
                #expect(text.contains("expected 1"), "\(text)")
            }
            try expectNothingWritten(f, "after the skipped write")
            // Once the trigger is gone, the device's retry of the same change id is applied, once.
            try f.pg.execute("DROP TRIGGER skip_trips ON trips")
            try await client.execute(uri: "/v1/datasets/trips/changes", method: .post, body: body) { response in
                #expect(response.status == .ok)
                let results = try JSONDecoder().decode(ChangeResults.self, from: Data(response.body.readableBytesView))
                    .results
                #expect(results.map(\.status) == [.applied])
            }
            #expect(try f.trip(1)?[1] == "5")
            #expect(try f.count("SELECT count(*) FROM ferry_changes") == 1)
        }
    }

    /// 100 MB of chunked body without Content-Length: answered 413 once the limit is read, the connection closed,
    /// and the rest never read.
    @Test func aHugeChunkedBodyIsCutOffAtTheLimit() async throws {
        try await withServer(limits: .init(maxBodyBytes: 1 << 20)) { f, client in
            try f.seed(id: 1, created: Self.base, updated: Self.base)
            let port = try #require(client.port)
            let (status, connection, sent, closed) = try await offPool { () throws -> (Int, String?, Int, Bool) in
                let c = try RawHTTPConnection(port: port)
                c.setTimeouts(seconds: 5)
                try c.send(
                    "POST /v1/datasets/trips/changes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
                let payload = [UInt8](repeating: UInt8(ascii: " "), count: 64 * 1024)
                let chunk = Array("10000\r\n".utf8) + payload + Array("\r\n".utf8)
                var sent = 0
                for _ in 0..<1_600 {  // 100 MiB at most
                    if c.isReadable() { break }
                    guard c.trySend(chunk) else { break }
                    sent += payload.count
                }
                let head = try c.readHead()
                let closed = (try? c.readToEnd()) != nil  // a receive timeout (not closed) throws
                return (head.status, head.headers["connection"], sent, closed)
            }
            #expect(status == 413)
            #expect(connection == "close")
            #expect(sent < 32 << 20, "sent \(sent) bytes before the answer")
            #expect(closed)
            // A declared Content-Length over the limit is refused before a byte of the body is read.
            let declared = try await offPool { () throws -> Int in
                let c = try RawHTTPConnection(port: port)
                c.setTimeouts(seconds: 5)
                try c.send(
                    "POST /v1/datasets/trips/changes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 104857600\r\n\r\n")
                return try c.readHead().status
            }
            #expect(declared == 413)
            try expectNothingWritten(f)
        }
    }
}
