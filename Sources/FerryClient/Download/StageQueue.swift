import Foundation

/// A bounded queue between two stages of a download (``DownloadPipeline``): the network task puts without blocking a
/// cooperative thread (``put(_:)-async``, it waits on a continuation when the queue is full), the stage threads put and
/// take blocking (``put(_:)``, ``take()``). ``close()`` lets the taker drain what is queued and then see nil;
/// ``cancel()`` drops what is queued and wakes everyone at once. `@unchecked Sendable`: every field is read and
/// written under `condition`.
final class StageQueue<Element: Sendable>: @unchecked Sendable {
    private let condition = NSCondition()
    private var items: [Element] = []
    private var head = 0
    private let capacity: Int
    private var closed = false
    private var cancelled = false
    /// The network task, waiting for room.
    private var waitingPutter: CheckedContinuation<Void, Never>?

    init(capacity: Int) {
        self.capacity = max(capacity, 1)
    }

    private var count: Int { items.count - head }

    /// Puts `item` from a stage thread, blocking while the queue is full; dropped once the queue is cancelled.
    func put(_ item: Element) {
        condition.lock()
        defer { condition.unlock() }
        while count >= capacity && !cancelled { condition.wait() }
        guard !cancelled else { return }
        items.append(item)
        condition.broadcast()
    }

    /// Puts `item` from async code: waits (without blocking its thread) while the queue is full.
    func put(_ item: Element) async {
        while !offer(item) {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                condition.lock()
                if count < capacity || cancelled {
                    condition.unlock()
                    continuation.resume()
                } else {
                    waitingPutter = continuation
                    condition.unlock()
                }
            }
        }
    }

    /// Puts `item` when there is room (or drops it when cancelled) and says so; false when the queue is full.
    private func offer(_ item: Element) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !cancelled else { return true }
        guard count < capacity else { return false }
        items.append(item)
        condition.broadcast()
        return true
    }

    /// The next item, blocking while the queue is empty; nil once it is closed and drained, or cancelled.
    func take() -> Element? {
        condition.lock()
        defer { condition.unlock() }
        while count == 0 && !closed && !cancelled { condition.wait() }
        guard !cancelled, count > 0 else { return nil }
        let item = items[head]
        head += 1
        if head >= 64 && head * 2 >= items.count {
            items.removeFirst(head)
            head = 0
        }
        condition.broadcast()
        wakePutter()
        return item
    }

    /// No more items: the taker drains the queue, then sees nil.
    func close() {
        condition.lock()
        defer { condition.unlock() }
        closed = true
        condition.broadcast()
    }

    /// Drops what is queued and makes every put and take return at once.
    func cancel() {
        condition.lock()
        defer { condition.unlock() }
        cancelled = true
        items.removeAll()
        head = 0
        condition.broadcast()
        wakePutter()
    }

    /// Called under the lock.
    private func wakePutter() {
        if let putter = waitingPutter {
            waitingPutter = nil
            putter.resume()
        }
    }
}

/// Waits, from async code, for a number of stage threads to end. `@unchecked Sendable`: its state is under a lock.
final class StageLatch: @unchecked Sendable {
    private let lock = NSLock()
    private var remaining: Int
    private var waiter: CheckedContinuation<Void, Never>?

    init(count: Int) {
        remaining = count
    }

    /// One stage ended.
    func arrive() {
        lock.lock()
        remaining -= 1
        let waiter = remaining == 0 ? self.waiter : nil
        if waiter != nil { self.waiter = nil }
        lock.unlock()
        waiter?.resume()
    }

    /// Returns once every stage has ended.
    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            lock.lock()
            if remaining == 0 {
                lock.unlock()
                continuation.resume()
            } else {
                waiter = continuation
                lock.unlock()
            }
        }
    }
}
