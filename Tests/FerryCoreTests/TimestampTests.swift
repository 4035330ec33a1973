import FerryCore
import Foundation
import Testing

@Suite struct TimestampTests {
    @Test func formatsEpochAndMilliseconds() {
        #expect(Timestamp.format(unixMillis: 0) == "1970-01-01T00:00:00.000Z")
        #expect(Timestamp.format(unixMillis: 1_763_719_200_123) == "2025-11-21T10:00:00.123Z")
        #expect(Timestamp.format(unixMillis: -1) == "1969-12-31T23:59:59.999Z")
    }

    @Test func parsesWhatItFormatsAndOffsets() {
        #expect(Timestamp.parseMillis("2025-11-21T10:00:00.123Z") == 1_763_719_200_123)
        #expect(Timestamp.parseMillis("2025-11-21T10:00:00Z") == 1_763_719_200_000)
        #expect(Timestamp.parseMillis("2025-11-21T12:00:00.123456+02:00") == 1_763_719_200_123)
        #expect(Timestamp.parseMillis("2025-11-21T10:00:00.1Z") == 1_763_719_200_100)
        #expect(Timestamp.parseMillis("2025-13-21T10:00:00Z") == nil)
        #expect(Timestamp.parseMillis("yesterday") == nil)
        #expect(Timestamp.parseMillis("2025-11-21T10:00:00.Z") == nil)
    }
}

@Suite struct RedactionTests {
    @Test func hidesPasswords() {
        #expect(redactURL("postgres://ferry:secret@db:5432/app") == "postgres://ferry:***@db:5432/app")
        #expect(redactURL("postgres://ferry@db/app") == "postgres://ferry@db/app")
        #expect(
            redactURL("postgres://db/app?password=secret&sslmode=off") == "postgres://db/app?password=***&sslmode=off")
        #expect(!redactURL("host=db password=secret user=x").contains("secret"))
    }
}
