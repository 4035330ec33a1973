import FerryCore
import FerryTestSupport
import Foundation
import Testing

@testable import FerryPostgres

/// What the merge engine asks of a connection beyond plain queries: statements prepared once per connection, and
/// rows sent with `COPY … FROM STDIN`.
@Suite struct PostgresConnectionTests {
    /// The statements a connection has prepared, as PostgreSQL lists them.
    static func prepared(_ pg: PostgresConnection) throws -> [String] {
        try pg.run("SELECT statement FROM pg_prepared_statements ORDER BY name").compactMap { $0[0] }
    }

    @Test func aPreparedStatementIsParsedOncePerConnectionAndAgainOnANewOne() throws {
        let database = try TestDatabase.create("prepared")
        defer { database.drop() }
        let pg = try database.connect()
        let sql = "SELECT ($1::int + 1)::text"
        // When: the same SQL runs three times with different values.
        for n in 1...3 {
            #expect(try pg.runPrepared(sql, [String(n)]) == [[String(n + 1)]])
        }
        // Then: PostgreSQL holds it once.
        #expect(try Self.prepared(pg) == [sql])
        // A new connection (as after a reconnect) prepares it again and answers alike.
        let other = try database.connect()
        #expect(try Self.prepared(other).isEmpty)
        #expect(try other.runPrepared(sql, ["41"]) == [["42"]])
        #expect(try Self.prepared(other) == [sql])
    }

    @Test func aPreparedStatementWhoseResultChangedShapeIsPreparedAgain() throws {
        let database = try TestDatabase.create("reprepare")
        defer { database.drop() }
        let pg = try database.connect()
        try pg.execute("CREATE TABLE notes(id int PRIMARY KEY, body text); INSERT INTO notes VALUES (1, 'a')")
        let sql = "SELECT * FROM notes WHERE id = $1::int"
        #expect(try pg.runPrepared(sql, ["1"]) == [["1", "a"]])
        // When: the table gains a column, so the prepared statement's result no longer fits.
        try pg.execute("ALTER TABLE notes ADD COLUMN extra text DEFAULT 'x'")
        // Then: that run fails (PostgreSQL: "cached plan must not change result type"), and the next one prepares
        // the statement afresh.
        #expect(throws: PostgresQueryError.self) { try pg.runPrepared(sql, ["1"]) }
        #expect(try pg.runPrepared(sql, ["1"]) == [["1", "a", "x"]])
    }

    @Test func aFailedPreparedRunLeavesTheStatementUsable() throws {
        let database = try TestDatabase.create("preparedfail")
        defer { database.drop() }
        let pg = try database.connect()
        let sql = "SELECT $1::int::text"
        #expect(throws: PostgresQueryError.self) { try pg.runPrepared(sql, ["not a number"]) }
        #expect(try pg.runPrepared(sql, ["7"]) == [["7"]])
        #expect(try Self.prepared(pg) == [sql])
    }

    @Test func aPipelineAnswersEveryStatementInOrder() throws {
        let database = try TestDatabase.create("pipeline")
        defer { database.drop() }
        let pg = try database.connect()
        let answers = try pg.runPipeline([
            .init("BEGIN"), .init("SELECT ($1::int * 2)::text", ["21"]), .init("SELECT 'x' UNION ALL SELECT 'y'"),
            .init("COMMIT"),
        ])
        #expect(answers == [[], [["42"]], [["x"], ["y"]], []])
    }

    @Test func aPipelineStopsAtTheFirstFailureAndTheConnectionStaysUsable() throws {
        let database = try TestDatabase.create("pipelinefail")
        defer { database.drop() }
        let pg = try database.connect()
        try pg.execute("CREATE TABLE notes(id int PRIMARY KEY)")
        // When: the second statement fails; the third must not run.
        do {
            _ = try pg.runPipeline([
                .init("BEGIN"), .init("INSERT INTO notes VALUES ($1::int)", ["oops"]),
                .init("INSERT INTO notes VALUES (1)"),
            ])
            Issue.record("a pipeline with a bad value succeeded")
        } catch {
            #expect(error.sqlState == "22P02")
        }
        // Then: the transaction is aborted until rolled back, after which the connection works as before.
        try pg.execute("ROLLBACK")
        #expect(try pg.run("SELECT count(*)::text FROM notes") == [["0"]])
        #expect(try pg.runPipeline([.init("SELECT 1::text")]) == [[["1"]]])
    }
}
