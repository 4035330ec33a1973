import FerryCore
import NIOCore
import NIOPosix

/// Requests waiting for a dataset to change (the manifest long-poll, ``ManifestLongPoll``). A waiter is a suspended
/// continuation and, for its deadline, a timer on an event loop: no thread, no task of its own, no polling. The
/// catalog calls ``wake(_:)`` with the datasets each reload changed, which resumes every waiter of those datasets at
/// once; ``shutDown()`` resumes all of them and refuses new ones.
///
/// A change that lands between reading the manifest and starting to wait is not missed: the caller reads
/// ``generation(_:)`` before it reads the catalog, and ``wait(dataset:since:for:)`` returns at once when the
/// generation has moved on since.
///
/// ```swift
/// let generation = waiters.generation("trips")
/// let view = catalog.access("trips")           // read after the generation
/// switch await waiters.wait(dataset: "trips", since: generation, for: .seconds(30)) {
/// case .changed: break                           // read the catalog again
/// case .deadline, .shutdown: break               // answer 304
/// }
/// ```
final class VersionWaiters: Sendable {
    /// Why a wait ended.
    enum Outcome: Equatable, Sendable {
        /// The dataset changed (or had changed since the generation the caller read).
        case changed
        /// The wait's duration ran out.
        case deadline
        /// The server is shutting down, or the waiting task was cancelled.
        case shutdown
    }

    private struct Waiter {
        let continuation: CheckedContinuation<Outcome, Never>
        var timer: Scheduled<Void>?
    }

    private struct State {
        var nextID = 0
        var generations: [String: UInt64] = [:]
        var waiting: [String: [Int: Waiter]] = [:]
        var closed = false
    }

    private let state = Locked(State())
    private let eventLoops: any EventLoopGroup

    init(eventLoops: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        self.eventLoops = eventLoops
    }

    /// A number that changes each time `dataset` changes: read it before reading the catalog.
    func generation(_ dataset: String) -> UInt64 {
        state.withLock { $0.generations[dataset] ?? 0 }
    }

    /// How many requests wait now (for the metrics and tests).
    var count: Int {
        state.withLock { $0.waiting.values.reduce(0) { $0 + $1.count } }
    }

    /// Suspends until `dataset` changes after `generation`, `duration` passes, or the server shuts down. Returns at
    /// once when the generation has moved already, and `.shutdown` after ``shutDown()`` or when the task is
    /// cancelled.
    func wait(dataset: String, since generation: UInt64, for duration: Duration) async -> Outcome {
        let id = state.withLock { state -> Int in
            state.nextID &+= 1
            return state.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Outcome, Never>) in
                let early: Outcome? = state.withLock { state in
                    if state.closed || Task.isCancelled { return .shutdown }
                    if (state.generations[dataset] ?? 0) != generation { return .changed }
                    state.waiting[dataset, default: [:]][id] = Waiter(continuation: continuation)
                    return nil
                }
                if let early {
                    continuation.resume(returning: early)
                    return
                }
                let timer = eventLoops.any().scheduleTask(in: TimeAmount(duration)) { [weak self] () -> Void in
                    self?.resume(dataset: dataset, id: id, with: .deadline)
                }
                let stillWaiting = state.withLock { state -> Bool in
                    guard state.waiting[dataset]?[id] != nil else { return false }
                    state.waiting[dataset]![id]!.timer = timer
                    return true
                }
                if !stillWaiting { timer.cancel() }
            }
        } onCancel: {
            resume(dataset: dataset, id: id, with: .shutdown)
        }
    }

    /// Resumes every waiter of each of `datasets` with `.changed`, and moves their generations on.
    func wake(_ datasets: some Sequence<String>) {
        let woken = state.withLock { state -> [Waiter] in
            var woken: [Waiter] = []
            for dataset in datasets {
                state.generations[dataset, default: 0] &+= 1
                if let waiters = state.waiting.removeValue(forKey: dataset) { woken.append(contentsOf: waiters.values) }
            }
            return woken
        }
        for waiter in woken {
            waiter.timer?.cancel()
            waiter.continuation.resume(returning: .changed)
        }
    }

    /// Resumes every waiter with `.shutdown` and answers later waits at once: graceful shutdown answers each
    /// waiting request with 304 instead of holding the drain for up to a minute.
    func shutDown() {
        let all = state.withLock { state -> [Waiter] in
            state.closed = true
            let all = state.waiting.values.flatMap(\.values)
            state.waiting.removeAll()
            return all
        }
        for waiter in all {
            waiter.timer?.cancel()
            waiter.continuation.resume(returning: .shutdown)
        }
    }

    private func resume(dataset: String, id: Int, with outcome: Outcome) {
        let waiter = state.withLock { state -> Waiter? in
            let waiter = state.waiting[dataset]?.removeValue(forKey: id)
            if state.waiting[dataset]?.isEmpty == true { state.waiting[dataset] = nil }
            return waiter
        }
        guard let waiter else { return }
        if outcome != .deadline { waiter.timer?.cancel() }
        waiter.continuation.resume(returning: outcome)
    }
}
