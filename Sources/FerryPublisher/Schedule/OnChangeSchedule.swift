import FerryCore
import FerryPostgres
import Foundation
import Logging
import ServiceLifecycle

/// Publishes when a source table changes (`ferry schedule --on-change`, `ferry serve --publish-on-change`), as a
/// swift-service-lifecycle `Service`. The triggers `ferry triggers install` puts on the source tables notify the
/// dataset's channel (``ChangeTriggers``); this service `LISTEN`s on it (``PostgresListener``) and coalesces:
/// - a burst of notifications leads to one publish, `debounce` after the last one, and never later than `maxDelay`
///   after the first;
/// - a notification during a publish leads to one more publish after it, never two side by side;
/// - it publishes once at start, and once after the LISTEN connection comes back (notifications sent while it was
///   away are lost);
/// - with `every`, it also publishes when that long has passed since the last publish: the safety net for changes
///   no trigger saw.
///
/// A failed publish is logged and retried at the next notification or tick. A graceful shutdown ends the wait, or
/// lets a running publish finish first.
///
/// ```swift
/// let schedule = OnChangeSchedule(publisher: publisher, channel: ChangeTriggers.channel(for: "trips"), logger: logger)
/// ```
public struct OnChangeSchedule: Service {
    /// Why a publish ran.
    public enum Reason: String, Sendable { case start, change, reconnect, interval }

    public let publisher: any Publishing
    public let channel: String
    public let debounce: Duration
    public let maxDelay: Duration
    public let every: Duration?
    let logger: Logger
    let onRun: (@Sendable (Reason, Result<PublishResult, any Error>) -> Void)?
    let onListening: (@Sendable (Bool) -> Void)?

    /// - Parameters:
    ///   - onRun: called after every publish with why it ran and its outcome (metrics, tests, a status page).
    ///   - onListening: called each time the LISTEN is in place, with whether it was a reconnect (tests).
    public init(
        publisher: any Publishing, channel: String, debounce: Duration = .milliseconds(500),
        maxDelay: Duration = .seconds(5),
        every: Duration? = nil, logger: Logger,
        onRun: (@Sendable (Reason, Result<PublishResult, any Error>) -> Void)? = nil,
        onListening: (@Sendable (Bool) -> Void)? = nil
    ) {
        self.publisher = publisher
        self.channel = channel
        self.debounce = debounce
        self.maxDelay = max(maxDelay, debounce)
        self.every = every
        self.logger = logger
        self.onRun = onRun
        self.onListening = onListening
    }

    public func run() async throws {
        let pending = Locked(ChangeCoalescer(debounce: debounce, maxDelay: maxDelay))
        let wake = WakeSignal()
        let events = PostgresListener.events(url: publisher.configuration.databaseURL, channel: channel)
        logger.info(
            "publishing on change",
            metadata: [
                "template": "\(publisher.configuration.templatePath)", "channel": "\(channel)",
                "every": "\(every.map { "\($0)" } ?? "off")",
            ])
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [logger, onListening] in
                for await event in events {
                    switch event {
                    case .listening(let reconnected):
                        onListening?(reconnected)
                        if reconnected {
                            logger.info(
                                "LISTEN connection back; publishing once to catch up",
                                metadata: ["channel": "\(channel)"])
                            pending.withLock { $0.note(.reconnect, table: nil, at: .now) }
                            wake.signal()
                        }
                    case .notification(let table):
                        logger.debug("change notified", metadata: ["table": "\(table)"])
                        pending.withLock { $0.note(.change, table: table, at: .now) }
                        wake.signal()
                    case .lost(let message):
                        logger.warning(
                            "LISTEN connection lost; reconnecting",
                            metadata: ["channel": "\(channel)", "error": "\(message)"])
                    }
                }
            }
            await loop(pending: pending, wake: wake)
            group.cancelAll()
        }
        logger.info("publish on change stopped")
    }

    private func loop(pending: Locked<ChangeCoalescer>, wake: WakeSignal) async {
        var reason: Reason? = .start
        var changed: Set<String>? = nil
        var lastPublish = ContinuousClock.now
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            if let reason {
                // A publish on change reads only the tables the triggers named (and what depends on them).
                let outcome = await publisher.publishLogging(
                    changedTables: changed, label: "publish on change", retry: "change or tick",
                    metadata: ["reason": "\(reason.rawValue)"], logger: logger)
                lastPublish = .now
                onRun?(reason, outcome)
            }
            let tick = every.map { lastPublish + $0 }
            let due = [pending.current.due, tick].compactMap { $0 }.min()
            // A graceful shutdown cancels the wait; the loop's condition then ends it.
            await cancelWhenGracefulShutdown { await wake.wait(until: due) }
            if Task.isShuttingDownGracefully || Task.isCancelled { break }
            let now = ContinuousClock.now
            if let taken = pending.withLock({ $0.take(at: now) }) {
                (reason, changed) = taken
            } else if let tick, tick <= now {
                (reason, changed) = (.interval, nil)
            } else {
                reason = nil
            }
        }
    }
}

/// Pending changes and when they are due (``OnChangeSchedule``): `debounce` after the last notification, and at
/// most `maxDelay` after the first.
struct ChangeCoalescer: Sendable {
    let debounce: Duration
    let maxDelay: Duration
    private var first: ContinuousClock.Instant?
    private var last: ContinuousClock.Instant?
    private var reason: OnChangeSchedule.Reason?
    /// The tables notified; nil once something may have changed anywhere (a reconnect).
    private var tables: Set<String>? = []

    init(debounce: Duration, maxDelay: Duration) {
        self.debounce = debounce
        self.maxDelay = maxDelay
    }

    /// A notification naming `table` (or a reconnect, nil: any table may have changed) at `instant`.
    mutating func note(_ why: OnChangeSchedule.Reason, table: String?, at instant: ContinuousClock.Instant) {
        if first == nil { first = instant }
        last = instant
        // A reconnect's catch-up is the reason to report when it is among the pending ones.
        if reason != .reconnect { reason = why }
        if let table, !table.isEmpty { tables?.insert(table) } else { tables = nil }
    }

    /// When the pending changes are due, nil when none are pending.
    var due: ContinuousClock.Instant? {
        guard let first, let last else { return nil }
        return min(last + debounce, first + maxDelay)
    }

    /// Takes the pending changes when they are due at `now`: their reason and the tables notified (nil: any), or
    /// nil (nothing due yet).
    mutating func take(at now: ContinuousClock.Instant) -> (OnChangeSchedule.Reason, Set<String>?)? {
        guard let due, due <= now else { return nil }
        defer { (first, last, reason, tables) = (nil, nil, nil, []) }
        return (reason ?? .change, tables)
    }
}

/// Wakes one waiter: ``wait(until:)`` returns at the deadline, at a ``signal()``, or when its task is cancelled. A
/// signal with no waiter is kept for the next wait.
final class WakeSignal: Sendable {
    private struct State {
        var signaled = false
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let state = Locked(State())

    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.signaled = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    func wait(until deadline: ContinuousClock.Instant?) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForSignal() }
            if let deadline {
                // A cancelled sleep is a wake-up: the group ends either way.
                group.addTask { try? await Task.sleep(until: deadline, clock: .continuous) }
            }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForSignal() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.signaled {
                        state.signaled = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            signal()
        }
    }
}
