import FerryCore

/// A fixed number of download chunks the whole server may hold in memory at once, so memory does not grow with the
/// number of concurrent downloads: a download waits for a chunk slot before it reads, and returns it once the chunk
/// is written. A download never waits while holding a slot (its read-ahead only takes a free slot, never waits for
/// one), so the downloads cannot deadlock on each other. Slots are handed out in arrival order.
///
/// ```swift
/// let budget = BufferBudget(slots: 64)
/// try await budget.acquire()
/// defer { budget.release() }
/// ```
final class BufferBudget: Sendable {
    private struct State {
        var free: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state: Locked<State>
    let slots: Int

    init(slots: Int) {
        self.slots = max(2, slots)
        state = Locked(State(free: max(2, slots)))
    }

    /// Takes a slot, waiting for one.
    func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = state.withLock { state -> Bool in
                if state.free > 0 && state.waiters.isEmpty {
                    state.free -= 1
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if granted { continuation.resume() }
        }
    }

    /// Takes a slot if one is free now.
    func tryAcquire() -> Bool {
        state.withLock { state in
            guard state.free > 0, state.waiters.isEmpty else { return false }
            state.free -= 1
            return true
        }
    }

    /// Returns a slot: to the first waiter, else to the pool.
    func release() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.waiters.isEmpty {
                state.free += 1
                return nil
            }
            return state.waiters.removeFirst()
        }
        waiter?.resume()
    }
}
