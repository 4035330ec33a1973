import FerryCore
import Foundation
import Logging
import ServiceLifecycle
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

@Suite("Publisher schedule")
struct ScheduleTests {
    /// Runs a schedule in a ServiceGroup until `runs` runs were reported, then shuts it down gracefully.
    func runSchedule(_ publisher: Publisher, runs wanted: Int) async throws -> [Result<PublishResult, any Error>] {
        let outcomes = Locked<[Result<PublishResult, any Error>]>([])
        let (stream, continuation) = AsyncStream<Int>.makeStream()
        let schedule = PublishSchedule(publisher: publisher, period: .milliseconds(150), logger: Logger(label: "test"))
        { outcome in
            let count = outcomes.withLock {
                $0.append(outcome)
                return $0.count
            }
            continuation.yield(count)
        }
        let group = ServiceGroup(services: [schedule], logger: Logger(label: "test"))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            for await count in stream where count >= wanted { break }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()  // run() returned: the schedule stopped
        }
        return outcomes.withLock { $0 }
    }

    @Test("a schedule publishes at each tick and stops on graceful shutdown")
    func runsAndStops() async throws {
        let fixture = try PublisherFixture(
            "schedule", sql: "CREATE TABLE t (id integer PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a');")
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate("dataset: sched\ntables: [{name: t}]\n")

        let started = ContinuousClock.now
        let outcomes = try await runSchedule(fixture.publisher(template: template), runs: 2)

        #expect(outcomes.count == 2)
        let results = outcomes.compactMap { try? $0.get() }
        #expect(results.map(\.version) == [1, 1])
        #expect(results.map(\.unchanged) == [false, true])
        #expect(ContinuousClock.now - started >= .milliseconds(150))  // the second run waited for its tick
    }

    @Test("a failed run is logged and retried at the next tick without ending the loop")
    func failuresRetry() async throws {
        let fixture = try PublisherFixture("schedfail")
        defer { fixture.cleanUp() }
        let template = try fixture.writeTemplate("dataset: sched\ntables: [{name: t}]\n")

        // The table does not exist yet: the first runs fail; once created, the next tick publishes.
        let outcomes = Locked<[Bool]>([])
        let (stream, continuation) = AsyncStream<Int>.makeStream()
        let fixtureURL = fixture.database.url
        let schedule = PublishSchedule(
            publisher: fixture.publisher(template: template), period: .milliseconds(100), logger: Logger(label: "test")
        ) { outcome in
            let count = outcomes.withLock { list in
                list.append((try? outcome.get()) != nil)
                return list.count
            }
            if count == 2 {
                try? PostgresConnection(url: fixtureURL).execute("CREATE TABLE t (id integer PRIMARY KEY)")
            }
            continuation.yield(count)
        }
        let group = ServiceGroup(services: [schedule], logger: Logger(label: "test"))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            for await count in stream where count >= 3 { break }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(outcomes.withLock { Array($0.prefix(3)) } == [false, false, true])
    }
}
