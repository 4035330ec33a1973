// Benchmark program for `scripts/bench outbox` (not part of any product): times ChangeMerger applying batches
// of updates to distinct rows, the way the changes endpoint does, against a PostgreSQL given by URL.
// Usage: ferry-outbox-bench URL ROWS BATCH CONCURRENCY [row|column]
//        ferry-outbox-bench decode ROWS BATCH   (the request side alone: see Decode.swift)
// `column`: the table is merged per column with an additive column (`merge: {rule: newest-wins, per: column,
// add: [stops]}`) and every change carries the base of each column it changes, as a device's outbox sends it.
import FerryCore
import FerryMerge
import FerryPostgres
import Foundation
import Logging

let args = CommandLine.arguments
if args.count == 4, args[1] == "decode", let rows = Int(args[2]), let batchSize = Int(args[3]) {
    decodeBench(rows: rows, batchSize: batchSize)
    exit(0)
}
guard (5...6).contains(args.count), let rows = Int(args[2]), let batchSize = Int(args[3]),
    let concurrency = Int(args[4]), args.count == 5 || ["row", "column"].contains(args[5])
else {
    FileHandle.standardError.write(Data("usage: ferry-outbox-bench URL ROWS BATCH CONCURRENCY [row|column]\n".utf8))
    exit(2)
}
let perColumn = args.count == 6 && args[5] == "column"
let url = args[1]
let base = "2026-11-21T09:00:00.000Z"

// Given: ROWS trips, all last written at `base` (scripts/bench.d/outbox.sh created the table).
let pg = try PostgresConnection(url: url)
try pg.execute("TRUNCATE bench_trips; DROP TABLE IF EXISTS ferry_changes; DROP TABLE IF EXISTS ferry_tombstones")
_ = try pg.query(
    "INSERT INTO bench_trips SELECT g, 'Växjö-Kalmar', 0, 0, $2::timestamptz, $2::timestamptz FROM generate_series(1, $1::int) g",
    [String(rows), base])
try pg.execute("VACUUM ANALYZE bench_trips")

var table = MergeTable(name: "trips", source: "bench_trips", writable: true, merge: .newestWins)
if perColumn { table.columnMerge = ColumnMerge(perColumn: true, additive: ["stops"]) }
let merger = try await ChangeMerger.start(
    dataset: "bench", tables: [table], configuration: .init(databaseURL: url, connections: concurrency),
    logger: Logger(label: "bench"))

// When: every row is updated once, in batches of BATCH distinct rows, CONCURRENCY batches at a time.
let batches: [ChangeBatch] = stride(from: 1, through: rows, by: batchSize).map { start in
    let changes = (start..<min(start + batchSize, rows + 1)).map { id in
        Change(
            id: UUID().uuidString, table: "trips", op: .update, key: ["id": .int(Int64(id))],
            values: ["seats": .int(Int64(id % 7)), "name": .string("Växjö-Kalmar \(id)")],
            editedAt: "2026-11-21T09:30:00.000Z",
            baseUpdatedAt: base, base: perColumn ? ["seats": .int(0), "name": .string("Växjö-Kalmar")] : nil)
    }
    return ChangeBatch(clientId: "bench", sentAt: Timestamp.format(Date()), changes: changes)
}
let clock = ContinuousClock()
let started = clock.now
let applied = try await withThrowingTaskGroup(of: Int.self) { group in
    var next = 0
    var total = 0
    for _ in 0..<concurrency where next < batches.count {
        let batch = batches[next]
        next += 1
        group.addTask { try await merger.apply(batch).results.filter { $0.status == .applied }.count }
    }
    while let done = try await group.next() {
        total += done
        if next < batches.count {
            let batch = batches[next]
            next += 1
            group.addTask { try await merger.apply(batch).results.filter { $0.status == .applied }.count }
        }
    }
    return total
}
let seconds =
    Double((clock.now - started).components.attoseconds) / 1e18 + Double((clock.now - started).components.seconds)
merger.shutdown()
// Then: every change applied.
guard applied == rows else {
    FileHandle.standardError.write(Data("only \(applied) of \(rows) changes applied\n".utf8))
    exit(1)
}
print(String(format: "%d %.3f %.0f", rows, seconds, Double(rows) / seconds))
