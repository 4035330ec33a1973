import Foundation

/// A value behind a lock: the server catalog's state (read on every request, replaced by the poller), the
/// publisher's shared work list.
///
/// ```swift
/// let counter = Locked(0)
/// counter.withLock { $0 += 1 }
/// ```
///
/// Unchecked Sendable: `value` is read and written only under `lock`, and `Value` is Sendable. (`Mutex` from
/// Synchronization would need macOS 15 and iOS 18; the package supports macOS 14 and iOS 17.)
public final class Locked<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    public init(_ value: Value) { self.value = value }

    public func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }

    public var current: Value {
        lock.lock()
        defer { lock.unlock() }
        return value
    }
}
