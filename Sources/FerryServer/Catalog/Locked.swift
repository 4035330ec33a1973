import Foundation

/// A value behind a lock: the catalog's state is read on every request and replaced by the poller.
final class Locked<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }

    var current: Value {
        lock.lock()
        defer { lock.unlock() }
        return value
    }
}
