import FerryCore
import FerryPostgres
import FerryTestSupport
import Foundation
import Logging
import Testing

@testable import FerryMerge

/// The merge engine's own tables in PostgreSQL: a `ferry_changes` made by an earlier Ferry is brought up to date at
/// start-up and keeps its answers; and the merger's connections are open before the first batch.
@Suite struct ChangeLogTests {
    static let base = "2026-11-21T09:00:00.000Z"

    /// `ferry_changes` as Ferry made it before issue 41: the id in the database's collation, answers as jsonb, and a
    /// B-tree on (dataset, processed_at).
    static let earlierDDL = """
        CREATE TABLE ferry_changes(
          id text PRIMARY KEY, dataset text NOT NULL, client_id text NOT NULL, result jsonb NOT NULL,
          processed_at timestamptz NOT NULL);
        CREATE INDEX ferry_changes_processed_at ON ferry_changes(dataset, processed_at);
        INSERT INTO ferry_changes VALUES ('kept-1', 'trips', 'device-1',
          '{"id":"kept-1","status":"gone","row":null,"message":"answered before the upgrade"}', '2026-11-20T10:00:00Z');
        """

    @Test func anEarlierChangeLogIsMigratedAndKeepsItsAnswers() async throws {
        let f = try await MergeFixture.make(
            rule: .clientWins, ddl: MergeFixture.tripsDDL + Self.earlierDDL, clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        func shape() throws -> [[String?]] {
            try f.pg.query(
                """
                SELECT (SELECT c.collname::text FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
                        WHERE a.attrelid = 'ferry_changes'::regclass AND a.attname = 'id'),
                       (SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes
                        WHERE tablename = 'ferry_changes'),
                       (SELECT format_type(atttypid, atttypmod) FROM pg_attribute
                        WHERE attrelid = 'ferry_changes'::regclass AND attname = 'result')
                """)
        }
        // The id compares bytewise, the B-tree gave way to the BRIN index, and the answers stay jsonb.
        #expect(try shape() == [["C", "ferry_changes_pkey,ferry_changes_processed_brin", "jsonb"]])

        // An answer stored before the upgrade is still the answer to its id.
        let resent = try await f.push(
            [change(.update, values: ["seats": .int(1)], edited: "2026-11-21T09:59:00.000Z", changeID: "kept-1")],
            sentAt: "2026-11-21T10:00:00.000Z")
        #expect(resent.map(\.status) == [.gone] && resent[0].message == "answered before the upgrade")
        // New answers go into the jsonb column.
        try f.seed(created: Self.base, updated: Self.base)
        let applied = try await f.push(
            [change(.update, values: ["seats": .int(2)], edited: "2026-11-21T09:59:00.000Z", base: Self.base)],
            sentAt: "2026-11-21T10:00:00.000Z")
        #expect(applied.map(\.status) == [.applied])
        #expect(try f.count("SELECT count(*) FROM ferry_changes WHERE result->>'status' = 'applied'") == 1)
        #expect(try await f.merger.pruneProcessedChanges(before: Timestamp.parse("2026-11-21T00:00:00.000Z")!) == 1)

        // A second start changes nothing more.
        let again = try await ChangeMerger.start(
            dataset: "trips", tables: [MergeTable(name: "trips", source: "trips", writable: true)],
            configuration: .init(databaseURL: f.database.url), logger: Logger(label: "test"))
        again.shutdown()
        #expect(try shape() == [["C", "ferry_changes_pkey,ferry_changes_processed_brin", "jsonb"]])
    }

    @Test func aNewChangeLogStoresAnswersAsText() async throws {
        let f = try await MergeFixture.make(clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        let type = try f.pg.query(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'ferry_changes'::regclass AND attname = 'result'"
        )
        #expect(type == [["text"]])
        try f.seed(created: Self.base, updated: Self.base)
        let answer = try await f.push(
            [change(.update, values: ["name": .string("a \"quoted\" \\ name")], edited: Self.base, base: Self.base)],
            sentAt: "2026-11-21T10:00:00.000Z")
        #expect(answer.map(\.status) == [.applied])
        // The stored text is the answer's JSON, as the device got it.
        let stored = try #require(try f.pg.query("SELECT result FROM ferry_changes").first?.first ?? nil)
        #expect(try JSONDecoder().decode(ChangeResult.self, from: Data(stored.utf8)) == answer[0])
    }

    @Test func theMergersConnectionsAreOpenBeforeTheFirstBatch() async throws {
        let f = try await MergeFixture.make(connections: 3)
        defer { f.close() }
        let open = try f.count(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        #expect(open == 3)
    }
}
