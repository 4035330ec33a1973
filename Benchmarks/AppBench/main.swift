import FerryClient
import FerryCore
import FerryGRDB
import Foundation
import GRDB
import Logging

// `scripts/bench app`: an update applied in place under an app's open GRDB pool while 4 readers query, against the
// swap by rename (close the pool, rename updated.db over database.db, reopen), in the same run, on the same data.
//
// Usage: ferry-app-bench --server URL --dataset NAME --work DIR
// Phase 1 syncs two devices to the current version and prints "ready for the next version"; the script then
// changes 1 % of the rows, publishes, waits until the server serves it, and creates DIR/go. Phase 2 measures.

struct Options {
    var server = URL(string: "http://127.0.0.1:8080")!
    var dataset = "campgrounds"
    var work = URL(fileURLWithPath: "/tmp/ferry-app-bench")

    init() throws {
        var arguments = Array(CommandLine.arguments.dropFirst()).makeIterator()
        while let flag = arguments.next() {
            guard let value = arguments.next() else { throw FerryError(.badInput, "\(flag) needs a value", key: flag) }
            switch flag {
            case "--server": server = URL(string: value)!
            case "--dataset": dataset = value
            case "--work": work = URL(fileURLWithPath: value)
            default: throw FerryError(.badInput, "unknown option \(flag): use --server, --dataset, --work", key: flag)
            }
        }
    }
}

/// Reader latencies, by phase.
final class Latencies: Sendable {
    enum Phase: Int, Sendable { case idle, applying, after }
    private let samples = Locked<[[Double]]>([[], [], []])
    private let phase = Locked(Phase.idle)
    var current: Phase { phase.current }
    func enter(_ next: Phase) { phase.withLock { $0 = next } }
    func add(_ seconds: Double, _ phase: Phase) { samples.withLock { $0[phase.rawValue].append(seconds) } }
    func percentile(_ p: Double, _ phase: Phase) -> Double {
        let sorted = samples.current[phase.rawValue].sorted()
        guard !sorted.isEmpty else { return .nan }
        return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }
    func count(_ phase: Phase) -> Int { samples.current[phase.rawValue].count }
}

/// A line to standard output at once (the script waits for "ready" through a file).
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func ms(_ seconds: Double) -> String { String(format: "%.2f ms", seconds * 1000) }
func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

/// Starts 4 readers, each on a thread of its own (as an app's screens read from theirs), querying 100 reviews at a
/// random place in a loop and recording each query's latency in the phase it started in. Returns the function
/// that stops them and waits for them.
func startReaders(on pool: DatabasePool, latencies: Latencies) throws -> @Sendable () -> Void {
    let maxRowid = try pool.read { db in try Int64.fetchOne(db, sql: "SELECT max(rowid) FROM reviews") ?? 1 }
    let stop = Locked(false)
    let done = DispatchGroup()
    for _ in 0..<4 {
        done.enter()
        Thread.detachNewThread {
            defer { done.leave() }
            var generator = SystemRandomNumberGenerator()
            while !stop.current {
                let from = Int64.random(in: 1...max(1, maxRowid - 100), using: &generator)
                let phase = latencies.current
                let started = ContinuousClock.now
                do {
                    _ = try pool.read { db in
                        try Row.fetchAll(
                            db, sql: "SELECT id, rating, length(body) FROM reviews WHERE rowid BETWEEN ? AND ?",
                            arguments: [from, from + 100])
                    }
                } catch {
                    return  // the pool closed under it: the phase is over
                }
                latencies.add(seconds(ContinuousClock.now - started), phase)
            }
        }
    }
    return {
        stop.withLock { $0 = true }
        done.wait()
    }
}

@main
struct AppBench {
    static func main() async throws {
        let options = try Options()
        var logger = Logger(label: "ferry-app-bench")
        logger.logLevel = .warning
        func configuration(_ name: String) -> FerryClient.Configuration {
            var configuration = FerryClient.Configuration(
                directory: options.work.appendingPathComponent(name), serverURL: options.server,
                dataset: options.dataset)
            configuration.push.onOpen = false
            return configuration
        }

        // Phase 1: both devices at the current version.
        let inPlace = try await FerryDatabase.open(
            configuration: configuration("in-place"), applyMode: .automatic, logger: logger)
        _ = try await inPlace.checkForUpdates()
        let renamed = try await FerryClient.open(configuration: configuration("rename"), logger: logger)
        _ = try await renamed.checkForUpdates()
        await renamed.close()
        say("ready for the next version (v\(inPlace.currentStatus.version ?? 0))")
        let go = options.work.appendingPathComponent("go")
        while !FileManager.default.fileExists(atPath: go.path) { try await Task.sleep(for: .milliseconds(50)) }

        // Phase 2a: the update applied in place while 4 readers query and an observation waits for the new version.
        let pool = inPlace.pool
        let latencies = Latencies()
        let stopInPlaceReaders = try startReaders(on: pool, latencies: latencies)
        let observed = Locked<ContinuousClock.Instant?>(nil)
        let version = inPlace.currentStatus.version ?? 0
        let observation = ValueObservation.tracking { db in
            try Int.fetchOne(db, sql: "SELECT version FROM ferry_snapshot")
        }
        let cancellable = observation.start(
            in: pool, scheduling: .async(onQueue: .global()), onError: { _ in },
            onChange: { value in
                if let value, value > version { observed.withLock { $0 = $0 ?? ContinuousClock.now } }
            })
        try await Task.sleep(for: .seconds(3))
        latencies.enter(.applying)
        let applyStarted = ContinuousClock.now
        let result = try await inPlace.checkForUpdates()
        let applyEnded = ContinuousClock.now
        latencies.enter(.after)
        try await Task.sleep(for: .seconds(1))
        stopInPlaceReaders()
        cancellable.cancel()
        let fired = observed.current
        try await inPlace.close()

        // Phase 2b: the same update by rename, with the same 4 readers until the pool must close: download and build
        // updated.db, close the pool, rename, reopen.
        var renamePool = try DatabasePool(path: options.work.appendingPathComponent("rename/database.db").path)
        let renameLatencies = Latencies()
        let stopRenameReaders = try startReaders(on: renamePool, latencies: renameLatencies)
        let renameStarted = ContinuousClock.now
        let client = try await FerryClient.open(
            configuration: {
                var c = configuration("rename")
                c.update.applyOnOpen = false
                return c
            }(), logger: logger)
        let renameResult = try await client.checkForUpdates()
        stopRenameReaders()
        try renamePool.close()
        _ = try await client.applyPendingUpdate()
        renamePool = try DatabasePool(path: options.work.appendingPathComponent("rename/database.db").path)
        _ = try await renamePool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") }
        let renameEnded = ContinuousClock.now
        await client.close()
        try renamePool.close()

        let applySeconds = seconds(applyEnded - applyStarted)
        let renameSeconds = seconds(renameEnded - renameStarted)
        say(
            "in place:  v\(version) → v\(inPlace.currentStatus.version ?? 0) by \(result.download.map { "\($0.path)" } ?? "?"), \(String(format: "%.2f s", applySeconds)) (download, keep previous.db, apply and verify in one transaction)"
        )
        say(
            "rename:    v\(version) → v\(renameResult.download?.version ?? 0) by \(renameResult.download.map { "\($0.path)" } ?? "?"), \(String(format: "%.2f s", renameSeconds)) (download, patch a copy, verify, close the pool, rename, reopen)"
        )
        say(String(format: "ratio:     in place / rename = %.2f× (target ≤ 1.5×)", applySeconds / renameSeconds))
        for phase in [Latencies.Phase.idle, .applying, .after] {
            say(
                "readers \(phase): \(latencies.count(phase)) queries, p50 \(ms(latencies.percentile(0.5, phase))), p99 \(ms(latencies.percentile(0.99, phase)))"
            )
        }
        say(
            "readers during the rename path's download and patch (until the pool closed): \(renameLatencies.count(.idle)) queries, p50 \(ms(renameLatencies.percentile(0.5, .idle))), p99 \(ms(renameLatencies.percentile(0.99, .idle)))"
        )
        say(
            String(
                format: "readers p99 during the apply / idle p99 = %.2f× (target ≤ 2×)",
                latencies.percentile(0.99, .applying) / latencies.percentile(0.99, .idle)))
        if let fired {
            let delay = seconds(fired - applyEnded)
            say(
                "observation: fired \(delay < 0 ? "before checkForUpdates returned (\(ms(-delay)) early)" : ms(delay) + " after the apply returned") (target ≤ 100 ms after the commit)"
            )
        } else {
            say("observation: did not fire")
        }
    }
}
