import FerryCore
import Foundation
import HTTPTypes
import Testing

@testable import FerryServer

/// The lane of the work a server does on request (``BuildLane``): a bounded number of jobs at once, a bounded
/// queue, and a `503` with `Retry-After` past it, never an unbounded pile of CPU and memory.
@Suite struct BuildLaneTests {
    /// Counts the jobs running at once.
    final class Gauge: Sendable {
        let state = Locked((now: 0, most: 0))
        func enter() {
            state.withLock {
                $0.now += 1
                $0.most = max($0.most, $0.now)
            }
        }
        func leave() { state.withLock { $0.now -= 1 } }
    }

    @Test("50 jobs on a lane of 2 slots all finish, never more than 2 at once, and the counts return to zero")
    func capHolds() async throws {
        let lane = BuildLane(slots: 2, maxWaiting: 64)
        let gauge = Gauge()
        let results = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<50 {
                group.addTask {
                    try await lane.run(.merge, dataset: "trips", name: "test") {
                        gauge.enter()
                        defer { gauge.leave() }
                        Thread.sleep(forTimeInterval: 0.002)
                        return index
                    }
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.sorted() == Array(0..<50))
        #expect(gauge.state.current.most == 2)
        #expect(lane.counts(dataset: "trips")[.merge] == BuildLane.Counts(running: 0, waiting: 0))
    }

    @Test("past the queue's bound a job is refused at once with 503 and Retry-After; the admitted ones finish")
    func overTheCapIsRefused() async throws {
        let lane = BuildLane(slots: 1, maxWaiting: 3, retryAfter: 2)
        let release = Locked(false)
        let outcomes = await withTaskGroup(of: String.self) { group in
            for _ in 0..<10 {
                group.addTask {
                    do {
                        try await lane.run(.build, dataset: "trips", name: "test") {
                            while !release.current { Thread.sleep(forTimeInterval: 0.001) }
                        }
                        return "done"
                    } catch let error as ServerError {
                        #expect(error.headers[.retryAfter] == "2")
                        release.withLock { $0 = true }
                        return "\(error.status.code)"
                    } catch {
                        return "\(error)"
                    }
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(outcomes.filter { $0 == "done" }.count == 4, "\(outcomes)")
        #expect(outcomes.filter { $0 == "503" }.count == 6, "\(outcomes)")
    }
}
