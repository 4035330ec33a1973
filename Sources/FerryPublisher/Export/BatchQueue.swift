import Foundation

/// A bounded queue of byte batches between one producer and one consumer thread: the producer copies small
/// messages (one COPY tuple each) into fixed-size batches, the consumer takes whole batches. At most `depth`
/// batches wait, so memory stays flat (about `(depth + 2) × batchSize`) however far the producer runs ahead. A
/// message larger than a batch travels alone in a buffer of its own size.
///
/// Message boundaries are kept only in that a batch holds whole messages, which is all binary COPY needs (a
/// message is one whole tuple, and ``CopyLoader`` reads several tuples from one buffer).
///
/// Unchecked Sendable: every shared field is read and written under `condition`; `filling` belongs to the producer.
final class BatchQueue: @unchecked Sendable {
    /// A batch of whole messages; `bytes` is valid until it is given back with ``recycle(_:)``.
    struct Batch {
        fileprivate let buffer: UnsafeMutableRawBufferPointer
        fileprivate(set) var count = 0
        var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: buffer[0..<count]) }
    }

    /// Thrown to the producer once the consumer has stopped (``cancel()``).
    struct Cancelled: Error {}

    private let batchSize: Int
    private let condition = NSCondition()
    private var ready: [Batch] = []
    private var spare: [Batch] = []
    private var finished = false
    private var cancelled = false
    private var filling: Batch

    init(batchSize: Int = 1 << 20, depth: Int = 4) {
        self.batchSize = batchSize
        filling = Batch(buffer: .allocate(byteCount: batchSize, alignment: 16))
        spare = (0..<depth).map { _ in Batch(buffer: .allocate(byteCount: batchSize, alignment: 16)) }
    }

    deinit {
        for batch in ready + spare + [filling] { batch.buffer.deallocate() }
    }

    // MARK: producer

    /// Copies `message` into the batch being filled, handing that batch over first when the message does not fit.
    /// Blocks while `depth` batches wait; throws ``Cancelled`` once the consumer stopped.
    func put(_ message: UnsafeRawBufferPointer) throws {
        if filling.count + message.count > batchSize {
            try handOver()
        }
        if message.count > batchSize {
            var single = Batch(buffer: .allocate(byteCount: message.count, alignment: 16))
            single.buffer.copyMemory(from: message)
            single.count = message.count
            do { try enqueue(single) } catch {
                single.buffer.deallocate()
                throw error
            }
            return
        }
        guard let base = message.baseAddress, message.count > 0 else { return }
        (filling.buffer.baseAddress! + filling.count).copyMemory(from: base, byteCount: message.count)
        filling.count += message.count
    }

    /// Hands over the last batch and tells the consumer nothing more comes.
    func finish() throws {
        try handOver()
        condition.withLock {
            finished = true
            condition.broadcast()
        }
    }

    private func handOver() throws {
        guard filling.count > 0 else { return }
        let full = filling
        try enqueue(full)
        filling = condition.withLock {
            while spare.isEmpty && !cancelled { condition.wait() }
            return spare.popLast() ?? Batch(buffer: .allocate(byteCount: batchSize, alignment: 16))
        }
        filling.count = 0
    }

    private func enqueue(_ batch: Batch) throws {
        try condition.withLock {
            guard !cancelled else { throw Cancelled() }
            ready.append(batch)
            condition.broadcast()
        }
    }

    // MARK: consumer

    /// The next batch, waiting for one; nil once the producer finished and every batch was taken, or after
    /// ``cancel()``.
    func take() -> Batch? {
        condition.withLock {
            while ready.isEmpty && !finished && !cancelled { condition.wait() }
            guard !cancelled, !ready.isEmpty else { return nil }
            return ready.removeFirst()
        }
    }

    /// Gives a taken batch back for reuse.
    func recycle(_ batch: Batch) {
        condition.withLock {
            if batch.buffer.count == batchSize, !cancelled {
                var reused = batch
                reused.count = 0
                spare.append(reused)
            } else {
                batch.buffer.deallocate()
            }
            condition.broadcast()
        }
    }

    // MARK: either side

    /// Stops both sides: the producer's next ``put(_:)`` throws ``Cancelled``, the consumer's ``take()`` returns nil.
    func cancel() {
        condition.withLock {
            cancelled = true
            condition.broadcast()
        }
    }
}
