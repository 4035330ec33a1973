import FerryCore
import Foundation
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

/// The PostgreSQL → SQLite type mapping of docs/templates.md, one type at a time, against a real PostgreSQL.
@Suite("Publisher type mapping")
struct TypeMappingTests {
    static let schema = """
        CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
        CREATE DOMAIN positive_int AS integer CHECK (VALUE > 0);
        CREATE TABLE everything (
          id integer PRIMARY KEY,
          i2 smallint, i4 integer, i8 bigint, flag boolean, r real, d double precision, n numeric, money_amount numeric(12,2),
          t text, vc varchar(10), ch char(5), u uuid, j json, jb jsonb, bin bytea, day date, ts timestamp, tstz timestamptz,
          ints integer[], texts text[], m mood, iv interval, dom positive_int);
        SET TIME ZONE 'Asia/Kolkata';
        INSERT INTO everything VALUES
          (1, -32768, 2147483647, -9223372036854775808, true, 1.5, 3.141592653589793,
           12345678901234567890.123456789, 0.10, 'Växjö-Kalmar 🚣 ünïcødé', 'abc', 'ab', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11',
           '{"b": 1, "a": [1,2]}', '{"b": 1, "a": [1, 2]}', '\\x00ff0000', '2024-02-29', '2024-01-02 03:04:05.678912',
           '2024-01-01 12:00:00', '{1,NULL,3}', '{"a b","c\\"d"}', 'happy', '1 day 2 hours', 7),
          (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, NULL),
          (3, 0, 0, 9223372036854775807, false, -0.25, -1e-300, -0.000000000000000000001, -99.99, '', '', '', '00000000-0000-0000-0000-000000000000',
           '[]', '{}', '', '1900-01-01', '1969-12-31 23:59:59.999', '-infinity', '{}', '{}', 'sad', '0', 1),
          (4, 1, 1, 1, true, 0, 0, 0, 0, 'x', 'x', 'x', 'ffffffff-ffff-ffff-ffff-ffffffffffff', 'null', 'null', '\\x00', 'infinity',
           '2000-01-01 00:00:00', '2038-01-19 03:14:08+00', '{{1,2},{3,4}}', '{NULL}', 'ok', '-1 mon', 2);
        """

    @Test("every type maps as documented, NULLs stay NULL")
    func everyType() throws {
        // Given a table with one column per type, rows written in a non-UTC session time zone
        let fixture = try PublisherFixture("types", sql: Self.schema)
        defer { fixture.cleanUp() }
        try fixture.execute("ALTER DATABASE \(fixture.database.name) SET timezone TO 'America/New_York'")
        let template = try fixture.writeTemplate("dataset: types\ntables:\n  - name: everything\n")

        // When it is published
        let result = try fixture.publish(template: template)

        // Then each value has the documented SQLite type and text form
        #expect(result.tables == ["everything": 4])
        let db = try fixture.open(dataset: "types", version: 1)
        let declared = Dictionary(
            uniqueKeysWithValues: try db.query("PRAGMA table_info(everything)").map { ($0[1].text!, $0[2].text!) })
        #expect(
            declared["i2"] == "INTEGER" && declared["i8"] == "INTEGER" && declared["flag"] == "INTEGER"
                && declared["dom"] == "INTEGER")
        #expect(declared["r"] == "REAL" && declared["d"] == "REAL")
        #expect(declared["bin"] == "BLOB")
        for name in ["n", "t", "vc", "ch", "u", "j", "jb", "day", "ts", "tstz", "ints", "texts", "m", "iv"] {
            #expect(declared[name] == "TEXT", "column \(name)")
        }

        let columns =
            "i2, i4, i8, flag, r, d, n, money_amount, t, vc, ch, u, j, jb, bin, day, ts, tstz, ints, texts, m, iv, dom"
        let rows = try db.query("SELECT \(columns) FROM everything ORDER BY id")
        #expect(rows.count == 4)
        let one = rows[0]
        #expect(one[0] == .integer(-32768))
        #expect(one[1] == .integer(2_147_483_647))
        #expect(one[2] == .integer(Int64.min))
        #expect(one[3] == .integer(1))
        #expect(one[4] == .real(1.5))
        #expect(one[5] == .real(3.141592653589793))
        #expect(one[6] == .text("12345678901234567890.123456789"))
        #expect(one[7] == .text("0.10"))
        #expect(one[8] == .text("Växjö-Kalmar 🚣 ünïcødé"))
        #expect(one[9] == .text("abc"))
        #expect(one[10] == .text("ab   "))  // char(5) keeps PostgreSQL's padding
        #expect(one[11] == .text("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"))
        #expect(one[12] == .text("{\"b\": 1, \"a\": [1,2]}"))  // json: text as stored
        #expect(one[13] == .text("{\"a\": [1, 2], \"b\": 1}"))  // jsonb: PostgreSQL's normal form
        #expect(one[14] == .blob([0x00, 0xff, 0x00, 0x00]))  // bytes with zeros survive
        #expect(one[15] == .text("2024-02-29"))
        #expect(one[16] == .text("2024-01-02T03:04:05.678Z"))  // truncated to milliseconds
        #expect(one[17] == .text("2024-01-01T06:30:00.000Z"))  // 12:00 in Kolkata (+05:30) is 06:30 UTC
        #expect(one[18] == .text("[1,null,3]"))
        #expect(one[19] == .text("[\"a b\",\"c\\\"d\"]"))
        #expect(one[20] == .text("happy"))
        #expect(one[21] == .text("P1DT2H"))
        #expect(one[22] == .integer(7))

        #expect(rows[1].allSatisfy { $0 == .null })

        let three = rows[2]
        #expect(three[2] == .integer(Int64.max))
        #expect(three[3] == .integer(0))
        #expect(three[4] == .real(-0.25))
        #expect(three[5] == .real(-1e-300))
        #expect(three[6] == .text("-0.000000000000000000001"))
        #expect(three[8] == .text("") && three[9] == .text("") && three[10] == .text("     "))
        #expect(three[11] == .text("00000000-0000-0000-0000-000000000000"))
        #expect(three[14] == .blob([]))
        #expect(three[15] == .text("1900-01-01"))
        #expect(three[16] == .text("1969-12-31T23:59:59.999Z"))
        #expect(three[17] == .text("-infinity"))
        #expect(three[18] == .text("[]"))

        let four = rows[3]
        #expect(four[11] == .text("ffffffff-ffff-ffff-ffff-ffffffffffff"))
        #expect(four[12] == .text("null") && four[13] == .text("null"))
        #expect(four[14] == .blob([0]))
        #expect(four[15] == .text("infinity"))
        #expect(four[16] == .text("2000-01-01T00:00:00.000Z"))
        #expect(four[17] == .text("2038-01-19T03:14:08.000Z"))
        #expect(four[18] == .text("[[1,2],[3,4]]"))
        #expect(four[19] == .text("[null]"))
        #expect(four[21] == .text("P-1M"))
    }

    @Test("timestamps sort as text in time order")
    func timestampsSortAsText() throws {
        let fixture = try PublisherFixture(
            "tsorder",
            sql: """
                CREATE TABLE events (id integer PRIMARY KEY, at timestamptz NOT NULL);
                INSERT INTO events SELECT g, timestamptz '1999-12-31 23:59:59.5+00' + g * interval '37 minutes 0.123 seconds' FROM generate_series(1, 500) g;
                """)
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate("dataset: events\ntables: [{name: events}]\n")
        _ = try fixture.publish(template: template)
        let db = try fixture.open(dataset: "events", version: 1)
        let byText = try db.query("SELECT id FROM events ORDER BY at").map { $0[0] }
        let byID = try db.query("SELECT id FROM events ORDER BY id").map { $0[0] }
        #expect(byText == byID)
        #expect(try db.scalar("SELECT at FROM events WHERE id = 1") == .text("2000-01-01T00:36:59.623Z"))
    }

    @Test("binary formatters: dates and timestamps across eras, uuids")
    func formatters() {
        let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: 64)
        defer { buffer.deallocate() }
        func text(_ n: Int) -> String { String(decoding: UnsafeBufferPointer(start: buffer, count: n), as: UTF8.self) }
        #expect(text(BinaryFormat.date(0, into: buffer)) == "2000-01-01")
        #expect(text(BinaryFormat.date(-10_957, into: buffer)) == "1970-01-01")
        #expect(text(BinaryFormat.date(59, into: buffer)) == "2000-02-29")
        #expect(text(BinaryFormat.timestamp(0, into: buffer)) == "2000-01-01T00:00:00.000Z")
        #expect(text(BinaryFormat.timestamp(-1, into: buffer)) == "1999-12-31T23:59:59.999Z")
        #expect(text(BinaryFormat.timestamp(-946_684_800_000_000, into: buffer)) == "1970-01-01T00:00:00.000Z")
        #expect(text(BinaryFormat.timestamp(Int64.max, into: buffer)) == "infinity")
        // Every millisecond offset agrees with FerryCore's Timestamp.
        for millis: Int64 in [-86_400_001, -1, 0, 1, 951_782_400_000, 4_102_444_799_999] {
            let n = BinaryFormat.timestamp(millis * 1000 - BinaryFormat.epochMicros, into: buffer)
            #expect(text(n) == Timestamp.format(unixMillis: millis))
        }
        let bytes: [UInt8] = Array(0..<16)
        let n = bytes.withUnsafeBytes { BinaryFormat.uuid($0.baseAddress!, into: buffer) }
        #expect(text(n) == "00010203-0405-0607-0809-0a0b0c0d0e0f")
    }
}
