import FerryCore
import FerryMerge
import FerryPostgres
import Foundation
import Logging

/// A server clock the test moves by hand.
public final class TestClock: Sendable {
    private let current: Locked<Date>

    public init(_ iso: String) { current = Locked(Timestamp.parse(iso)!) }

    public var now: Date { current.current }
    public func set(_ iso: String) { current.withLock { $0 = Timestamp.parse(iso)! } }
    public func set(_ date: Date) { current.withLock { $0 = date } }
}

/// A fresh database with the thesis' trips table (Tables 4.3.1–4.3.4: id, name, two integers, createdAt and
/// updatedAt) and a merger over it with an injected clock.
public struct MergeFixture {
    public let database: TestDatabase
    public let pg: PostgresConnection
    public let clock: TestClock
    public let merger: ChangeMerger

    public static let tripsDDL = """
        CREATE TABLE trips(
          id int PRIMARY KEY,
          name text NOT NULL,
          seats int NOT NULL,
          stops int NOT NULL,
          created_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL);
        CREATE TABLE routes(id int PRIMARY KEY, name text, created_at timestamptz, updated_at timestamptz);
        """

    public static func make(
        rule: MergeRule = .newestWins, ddl: String = tripsDDL, tables: [MergeTable]? = nil, connections: Int = 2,
        clock: String = "2018-04-29T11:21:02.000Z"
    ) async throws -> MergeFixture {
        let database = try TestDatabase.create("merge")
        let pg = try database.connect()
        try pg.execute(ddl)
        let testClock = TestClock(clock)
        let merger = try await ChangeMerger.start(
            dataset: "trips",
            tables: tables ?? [
                MergeTable(name: "trips", source: "trips", writable: true, merge: rule),
                MergeTable(name: "routes", source: "public.routes", writable: false),
            ],
            configuration: .init(databaseURL: database.url, connections: connections, now: { testClock.now }),
            logger: Logger(label: "test"))
        return MergeFixture(database: database, pg: pg, clock: testClock, merger: merger)
    }

    public func close() {
        merger.shutdown()
        database.drop()
    }

    /// Puts a trip on the server as if it had been written at those times.
    public func seed(
        id: Int = 1, name: String = "Växjö-Kalmar", seats: Int = 0, stops: Int = 0, created: String, updated: String
    ) throws {
        _ = try pg.query(
            "INSERT INTO trips VALUES ($1::int, $2, $3::int, $4::int, $5::timestamptz, $6::timestamptz)",
            [String(id), name, String(seats), String(stops), created, updated])
    }

    /// The server's trip as (name, seats, stops, created, updated), nil when absent.
    public func trip(_ id: Int = 1) throws -> [String]? {
        try pg.query(
            """
            SELECT name, seats::text, stops::text,
                   to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                   to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
            FROM trips WHERE id = $1::int
            """, [String(id)]
        ).first?.map { $0 ?? "NULL" }
    }

    public func count(_ sql: String, _ parameters: [String?] = []) throws -> Int {
        let value = try pg.query(sql, parameters).first?.first ?? nil
        return Int(value ?? "0") ?? 0
    }

    /// Sends one batch from a device whose clock read `sentAt` when it sent.
    public func push(_ changes: [Change], sentAt: String, client: String = "device-1") async throws -> [ChangeResult] {
        try await merger.apply(ChangeBatch(clientId: client, sentAt: sentAt, changes: changes)).results
    }
}

/// A trip row as the server answers it.
public func tripRow(
    id: Int = 1, name: String = "Växjö-Kalmar", seats: Int64, stops: Int64 = 0, created: String, updated: String
) -> [String: JSONValue] {
    [
        "id": .int(Int64(id)), "name": .string(name), "seats": .int(seats), "stops": .int(stops),
        "created_at": .string(created), "updated_at": .string(updated),
    ]
}

public func change(
    _ op: Change.Operation, id: Int = 1, values: [String: JSONValue] = [:], edited: String, base: String? = nil,
    changeID: String = UUID().uuidString,
    table: String = "trips"
) -> Change {
    Change(
        id: changeID, table: table, op: op, key: ["id": .int(Int64(id))], values: values, editedAt: edited,
        baseUpdatedAt: base)
}

/// A JSON value as the text SQL prints (strings as is, integers in decimal), nil for null or absent.
public func text(_ value: JSONValue?) -> String? {
    switch value {
    case .string(let s): return s
    case .int(let i): return String(i)
    case .double(let d): return String(d)
    case .bool(let b): return b ? "true" : "false"
    case .null, nil: return nil
    }
}
