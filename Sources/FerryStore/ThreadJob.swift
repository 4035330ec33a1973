import Foundation

/// Blocking work on a thread of its own, joined by the thread that started it: the publish job's way to run
/// blocking steps side by side, and the deflating threads of
/// ``Gzip/compressAndHashParallel(from:to:encoding:threads:chunkSize:)``
/// (docs/ARCHITECTURE.md, "Concurrency"). Unlike `DispatchQueue.concurrentPerform`,
/// the job is guaranteed its own thread, so two jobs that wait on each other (a producer and a consumer) cannot
/// deadlock on a busy pool.
///
/// Unchecked Sendable: `body` and what it captures are handed to the new thread and used there alone until
/// ``join()`` returns; the result is written before the semaphore is signalled and read after it was waited for.
package final class ThreadJob<Value>: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var result: Result<Value, any Error>?
    private var body: (() throws -> Value)?

    /// Starts `body` on a new thread named `name`.
    package init(name: String, _ body: @escaping () throws -> Value) {
        self.body = body
        let thread = Thread { [self] in
            let work = self.body!
            self.body = nil
            result = Result { try work() }
            done.signal()
        }
        thread.name = name
        thread.start()
    }

    /// Set by the thread that started the job once it has seen the job finish.
    private var joined = false

    /// Waits for the job and returns its value, or throws its error.
    package func join() throws -> Value {
        if !joined {
            done.wait()
            joined = true
        }
        return try result!.get()
    }

    /// Runs `body` on a new thread named `name` and awaits its value: the async caller's way onto the publish job's
    /// lane (docs/ARCHITECTURE.md, "Concurrency"). The calling task is suspended, not blocked, so no cooperative
    /// thread waits meanwhile; `body` is guaranteed its own thread, so whole-file hashing or a long fsync never
    /// delays the server's short file work on `NIOThreadPool.singleton`.
    ///
    /// ```swift
    /// let sha256 = try await ThreadJob.run(name: "ferry-hash") { try FileDigest.sha256Hex(of: file) }
    /// ```
    package static func run(name: String, _ body: @escaping @Sendable () throws -> Value) async throws -> Value
    where Value: Sendable {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
            let thread = Thread { continuation.resume(with: Result { try body() }) }
            thread.name = name
            thread.start()
        }
    }

    /// The job's value (or error) if it has finished, else nil at once.
    package func poll() throws -> Value? {
        guard joined || done.wait(timeout: .now()) == .success else { return nil }
        joined = true
        return try result!.get()
    }
}
