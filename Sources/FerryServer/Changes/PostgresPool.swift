import FerryCore
import FerryPublisher
import Foundation
import NIOPosix

/// A small pool of blocking libpq connections whose calls run on NIO's thread pool, never on an event loop.
/// Connections are opened lazily (at most `size`), checked out one per job, dropped when broken, and closed by
/// ``close()`` (the owning ``ChangeMerger`` service calls it on shutdown).
final class PostgresPool: @unchecked Sendable {
    /// Owns a connection across threads; only one job uses it at a time (the pool guarantees it).
    final class Box: @unchecked Sendable {
        let connection: PostgresConnection
        init(_ connection: PostgresConnection) { self.connection = connection }
    }

    let url: String
    let size: Int
    let threadPool: NIOThreadPool
    /// SQL run once on every new connection.
    let setup: String

    private let lock = NSLock()
    private var idle: [Box] = []
    private var open = 0
    private var waiters: [CheckedContinuation<Box?, any Error>] = []
    private var closed = false

    init(url: String, size: Int, threadPool: NIOThreadPool = .singleton, setup: String = "SET TimeZone = 'UTC'") {
        self.url = url
        self.size = max(1, size)
        self.threadPool = threadPool
        self.setup = setup
    }

    /// Runs `body` with a connection on the thread pool.
    func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let box = try await checkOut()
        var healthy = true
        defer { checkIn(box, healthy: healthy) }
        do {
            return try await threadPool.runIfActive {
                try body(box.connection)
            }
        } catch {
            healthy = box.connection.isConnected
            throw error
        }
    }

    /// Closes idle connections and refuses new work; connections in use close when returned.
    func close() {
        let (boxes, pending) = lock.withLock { () -> ([Box], [CheckedContinuation<Box?, any Error>]) in
            closed = true
            defer { idle = []; waiters = [] }
            return (idle, waiters)
        }
        _ = boxes  // released here: PostgresConnection closes in deinit
        for waiter in pending {
            waiter.resume(throwing: FerryError(.database, "the PostgreSQL pool is shut down"))
        }
    }

    private func checkOut() async throws -> Box {
        enum Next { case use(Box), connect, wait }
        let next: Next = try lock.withLock {
            if closed { throw FerryError(.database, "the PostgreSQL pool is shut down") }
            if let box = idle.popLast() { return .use(box) }
            if open < size { open += 1; return .connect }
            return .wait
        }
        switch next {
        case .use(let box):
            return box
        case .connect:
            return try await connect()
        case .wait:
            let handed: Box? = try await withCheckedThrowingContinuation { continuation in
                let closedNow = lock.withLock { () -> Bool in
                    if closed { return true }
                    waiters.append(continuation)
                    return false
                }
                if closedNow { continuation.resume(throwing: FerryError(.database, "the PostgreSQL pool is shut down")) }
            }
            // nil means a connection slot was freed (a broken connection was dropped): open a new one.
            if let handed { return handed }
            return try await connect()
        }
    }

    private func connect() async throws -> Box {
        do {
            let (url, setup) = (self.url, self.setup)
            return try await threadPool.runIfActive {
                let connection = try PostgresConnection(url: url)
                try connection.execute(setup)
                return Box(connection)
            }
        } catch {
            releaseSlot()
            throw error
        }
    }

    private func checkIn(_ box: Box, healthy: Bool) {
        if healthy {
            let waiter: CheckedContinuation<Box?, any Error>? = lock.withLock {
                if closed { open -= 1; return nil }
                if !waiters.isEmpty { return waiters.removeFirst() }
                idle.append(box)
                return nil
            }
            waiter?.resume(returning: box)
        } else {
            releaseSlot()
        }
    }

    private func releaseSlot() {
        let waiter: CheckedContinuation<Box?, any Error>? = lock.withLock {
            if !closed, !waiters.isEmpty { return waiters.removeFirst() }  // the waiter opens its own connection
            open -= 1
            return nil
        }
        waiter?.resume(returning: nil)
    }
}
