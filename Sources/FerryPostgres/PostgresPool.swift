import FerryCore
import Foundation
import NIOPosix

/// A small pool of blocking libpq connections whose calls run on a thread pool of their own (one thread per
/// connection), never on an event loop and never on `NIOThreadPool.singleton`: the server reads snapshot bytes
/// there, so a slow query (a merge waiting for a row lock, a token check on a busy database) must not delay
/// downloads or the catalog. Connections are opened lazily (at most `size`; ``fill()`` opens them all ahead),
/// checked out one per job, dropped when broken, and closed by ``close()`` (the owning service calls it on shutdown), which also stops the threads.
///
/// Every connect and every job records whether PostgreSQL answered (``health``), at no extra query: the status page
/// reads that instead of asking the database on each request.
///
/// Unchecked Sendable: `idle`, `open`, `waiters` and `closed` are read and written only under `lock` (and in
/// `deinit`, which nothing else can run beside); every other stored property is a `let` of a Sendable type.
package final class PostgresPool: @unchecked Sendable {
    /// What the pool last saw of PostgreSQL. A job whose SQL failed on a connection that stayed up counts as an
    /// answer (PostgreSQL is reachable); a failed connect or a connection lost during a job is a failure.
    package struct Health: Sendable, Equatable {
        /// When PostgreSQL last answered (a connect or a job on a live connection).
        package var lastSuccess: Date?
        /// When a connect last failed or a connection was lost.
        package var lastFailure: Date?
        /// Why, without the database URL or its password (at most 300 characters).
        package var lastError: String?

        /// True when the latest event was an answer; false when it was a failure; nil before either.
        package var connected: Bool? {
            switch (lastSuccess, lastFailure) {
            case (nil, nil): return nil
            case (.some, nil): return true
            case (nil, .some): return false
            case (.some(let success), .some(let failure)): return success >= failure
            }
        }
    }

    /// Owns a connection across threads. Unchecked Sendable: only one job uses it at a time, because the pool hands
    /// a box to one job (checked out of `idle` under `lock`) and takes it back when that job ends.
    final class Box: @unchecked Sendable {
        let connection: PostgresConnection
        init(_ connection: PostgresConnection) { self.connection = connection }
    }

    let url: String
    let size: Int
    let threadPool: NIOThreadPool
    /// Whether ``threadPool`` was made by this pool (then ``close()`` shuts it down).
    private let ownsThreadPool: Bool
    /// SQL run once on every new connection.
    let setup: String

    private let lock = NSLock()
    private var idle: [Box] = []
    private var open = 0
    private var waiters: [CheckedContinuation<Box?, any Error>] = []
    private var closed = false
    private let recorded = Locked(Health())

    /// What the pool last saw of PostgreSQL.
    package var health: Health { recorded.current }

    /// `threadPool`: nil (the default) makes one with a thread per connection.
    package init(url: String, size: Int, threadPool: NIOThreadPool? = nil, setup: String = "SET TimeZone = 'UTC'") {
        self.url = url
        self.size = max(1, size)
        if let threadPool {
            self.threadPool = threadPool
            ownsThreadPool = false
        } else {
            let own = NIOThreadPool(numberOfThreads: max(1, size))
            own.start()
            self.threadPool = own
            ownsThreadPool = true
        }
        self.setup = setup
    }

    deinit {
        // A pool dropped without close() still stops its threads (NIO asserts that a pool is stopped before deinit).
        if ownsThreadPool && !closed { threadPool.shutdownGracefully { _ in } }
    }

    /// Runs `body` with a connection on the thread pool.
    package func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws
        -> T
    {
        let box = try await checkOut()
        var healthy = true
        defer { checkIn(box, healthy: healthy) }
        do {
            let value = try await threadPool.runIfActive {
                try body(box.connection)
            }
            recordSuccess()
            return value
        } catch {
            healthy = box.connection.isConnected
            if healthy { recordSuccess() } else { recordFailure(error) }
            throw error
        }
    }

    /// Opens connections until `size` are open, and keeps them idle: the first jobs then find a connection ready
    /// (a connect and its setup take a few milliseconds, more than a merge of a small batch). Throws when a connect
    /// fails; the connections opened so far stay.
    ///
    /// ```swift
    /// try await pool.fill()
    /// ```
    package func fill() async throws {
        while lock.withLock({ () -> Bool in
            guard !closed, open < size else { return false }
            open += 1
            return true
        }) {
            checkIn(try await connect(), healthy: true)
        }
    }

    /// Closes idle connections and refuses new work; connections in use close when returned.
    package func close() {
        let (boxes, pending) = lock.withLock { () -> ([Box], [CheckedContinuation<Box?, any Error>]) in
            closed = true
            defer {
                idle = []
                waiters = []
            }
            return (idle, waiters)
        }
        _ = boxes  // released here: PostgresConnection closes in deinit
        for waiter in pending {
            waiter.resume(throwing: FerryError(.database, "the PostgreSQL pool is shut down"))
        }
        // Jobs already running finish; their connections close when returned.
        if ownsThreadPool { threadPool.shutdownGracefully { _ in } }
    }

    private func checkOut() async throws -> Box {
        enum Next {
            case use(Box)
            case connect, wait
        }
        let next: Next = try lock.withLock {
            if closed { throw FerryError(.database, "the PostgreSQL pool is shut down") }
            if let box = idle.popLast() { return .use(box) }
            if open < size {
                open += 1
                return .connect
            }
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
                if closedNow {
                    continuation.resume(throwing: FerryError(.database, "the PostgreSQL pool is shut down"))
                }
            }
            // nil means a connection slot was freed (a broken connection was dropped): open a new one.
            if let handed { return handed }
            return try await connect()
        }
    }

    private func connect() async throws -> Box {
        do {
            let (url, setup) = (self.url, self.setup)
            let box = try await threadPool.runIfActive {
                let connection = try PostgresConnection(url: url)
                try connection.execute(setup)
                return Box(connection)
            }
            recordSuccess()
            return box
        } catch {
            releaseSlot()
            recordFailure(error)
            throw error
        }
    }

    private func recordSuccess() {
        let now = Date()
        recorded.withLock { $0.lastSuccess = now }
    }

    private func recordFailure(_ error: any Error) {
        let now = Date()
        let message = Self.healthMessage(error, url: url)
        recorded.withLock {
            $0.lastFailure = now
            $0.lastError = message
        }
    }

    /// The error's message for the status page: the URL (as given and as redacted) and any password are cut out,
    /// libpq's lines are joined, and it is at most 300 characters.
    static func healthMessage(_ error: any Error, url: String) -> String {
        var message = (error as? FerryError)?.message ?? String(describing: error)
        let redacted = redactURL(url)
        for form in [url, redacted] where !form.isEmpty {
            message = message.replacingOccurrences(of: " at \(form)", with: "").replacingOccurrences(
                of: form, with: "the database")
        }
        message = PostgresConnection.scrub(message, url: url)
            .split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
        return message.count > 300 ? String(message.prefix(300)) + "…" : message
    }

    private func checkIn(_ box: Box, healthy: Bool) {
        if healthy {
            let waiter: CheckedContinuation<Box?, any Error>? = lock.withLock {
                if closed {
                    open -= 1
                    return nil
                }
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
