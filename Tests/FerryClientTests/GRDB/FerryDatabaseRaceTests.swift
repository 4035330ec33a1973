import FerryCore
import FerryGRDB
import FerryPostgres
import FerryPublisher
import Foundation
import GRDB
import Testing

@testable import FerryClient

/// Readers and writers of the app's pool while updates are applied in place: every read sees one whole version, and
/// every write the app commits is accounted for (uploaded and answered, or still queued).
@Suite struct FerryDatabaseRaceTests {
    @Test func readersSeeOnlyWholeVersionsAndNoWriteIsLostDuringUpdatesRollbacksAndPushes() async throws {
        try await FerryDatabaseTests().withWorld { world in
            // Every published version sets all published trips' bags to its version number minus one, and records
            // its number in ferry_snapshot: a read transaction that mixed two versions would see two bags values, or
            // bags that do not match the version in the other table.
            try world.postgres(#"UPDATE trips SET bags = 1, "updatedAt" = date_trunc('milliseconds', now())"#)
            try await world.waitForVersion(try await world.publish().version)
            let ferry = try await world.open("race", mode: .automatic)
            _ = try await ferry.checkForUpdates()
            #expect(ferry.currentStatus.version == 2)
            let pool = ferry.pool
            let stop = Locked(false)

            // Readers: each transaction must see one bags value across the published rows
            let mixed = Locked(0)
            let reads = Locked(0)
            let readers = Task.detached {
                while !stop.current {
                    let whole = try await pool.read { db -> Bool in
                        let bags = try Int.fetchAll(
                            db, sql: "SELECT DISTINCT bags FROM trips WHERE name != 'written-by-app'")
                        let version = try Int.fetchOne(db, sql: "SELECT version FROM ferry_snapshot") ?? -1
                        return bags.count == 1 && bags[0] == version - 1
                    }
                    reads.withLock { $0 += 1 }
                    if !whole { mixed.withLock { $0 += 1 } }
                }
            }
            // Writer: inserts rows with distinct passengers numbers, each a local edit
            let written = Locked<[Int]>([])
            let writer = Task.detached {
                var n = 0
                while !stop.current {
                    n += 1
                    let value = n
                    try await pool.write { db in
                        try db.execute(
                            sql:
                                "INSERT INTO trips (id, name, passengers, bags, createdAt, updatedAt) VALUES (?, 'written-by-app', ?, 0, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z')",
                            arguments: [UUID().uuidString.lowercased(), value])
                    }
                    written.withLock { $0.append(value) }
                    try await Task.sleep(for: .milliseconds(5))
                }
            }

            // 50 rounds of publish + automatic in-place apply, with a push every 5 and a rollback every 10
            for round in 2...51 {
                try world.postgres(
                    #"UPDATE trips SET bags = \#(round), "updatedAt" = date_trunc('milliseconds', now()) WHERE name != 'written-by-app'"#
                )
                let version = try await world.publish().version
                try await world.waitForVersion(version)
                _ = try await ferry.checkForUpdates()
                if round % 5 == 0 { _ = try await ferry.push() }
                if round % 10 == 0 { _ = try await ferry.client.rollback() }
            }
            stop.withLock { $0 = true }
            try await readers.value
            try await writer.value
            _ = try await ferry.push()

            // Then no read saw a mix, and every write the app committed is in PostgreSQL or still queued
            #expect(mixed.current == 0)
            #expect(reads.current > 50)
            let committed = Set(written.current)
            let server = Set(
                try world.database.connect().query("SELECT passengers FROM trips WHERE name = 'written-by-app'", [])
                    .compactMap {
                        ($0.first ?? nil).flatMap { Int($0) }
                    })
            let queued = try await ferry.client.pendingEdits()
            #expect(queued == 0)
            #expect(server.isSuperset(of: committed))
            #expect(committed.count > 10)
            try await ferry.close()
        }
    }
}
