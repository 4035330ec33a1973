import FerryCore
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One data task's response, as its delegate delivers it, turned into an awaitable head and an async body: the
/// delegate pushes (``received(_:response:)``, ``completed(_:response:)``) and the caller pulls (``head()``,
/// ``next()``). The head is taken from the task's response with the first bytes or at the end, so the delegate needs
/// no `didReceive response` callback (whose completion handler's signature differs between Apple's SDK and
/// FoundationNetworking). Past `highWaterMark` bytes not yet pulled (nil: never), the task is suspended until the
/// caller has pulled all but a quarter of them.
/// `@unchecked Sendable`: every field is guarded by `lock`; continuations are resumed outside it.
final class URLSessionTaskStream: @unchecked Sendable {
    private let lock = NSLock()
    private let task: URLSessionTask
    private let highWaterMark: Int?
    private var response: HTTPURLResponse?
    private var headWaiter: CheckedContinuation<HTTPURLResponse, any Error>?
    private var chunks: [Data] = []
    private var buffered = 0
    private var suspended = false
    /// Set once the task completed: success, or its error.
    private var ended: Result<Void, any Error>?
    private var bodyWaiter: CheckedContinuation<Data?, any Error>?
    private var problem: TLSProblem?

    init(task: URLSessionTask, highWaterMark: Int?) {
        self.task = task
        self.highWaterMark = highWaterMark
    }

    /// The TLS failure the delegate's own trust evaluation found, if any.
    var tlsProblem: TLSProblem? {
        lock.lock()
        defer { lock.unlock() }
        return problem
    }

    func setTLSProblem(_ problem: TLSProblem) {
        lock.lock()
        self.problem = problem
        lock.unlock()
    }

    // MARK: Pushed by the delegate

    /// Bytes of the body arrived.
    func received(_ data: Data, response: URLResponse?) {
        lock.lock()
        let head = takeHead(response)
        var deliver: CheckedContinuation<Data?, any Error>?
        var suspend = false
        if let waiter = bodyWaiter {
            bodyWaiter = nil
            deliver = waiter
        } else {
            chunks.append(data)
            buffered += data.count
            if let highWaterMark, !suspended, buffered > highWaterMark {
                suspended = true
                suspend = true
            }
        }
        lock.unlock()
        if let (waiter, response) = head { waiter.resume(returning: response) }
        deliver?.resume(returning: data)
        if suspend { task.suspend() }
    }

    /// The task ended, with `error` or without.
    func completed(_ error: (any Error)?, response: URLResponse?) {
        lock.lock()
        let head = takeHead(response)
        ended = error.map { .failure($0) } ?? .success(())
        let headWaiter = self.headWaiter
        self.headWaiter = nil
        let bodyWaiter = self.bodyWaiter
        self.bodyWaiter = nil
        lock.unlock()
        if let (waiter, response) = head { waiter.resume(returning: response) }
        // Still waiting for a head: the task ended without a response (or with one that is not HTTP).
        headWaiter?.resume(throwing: error ?? URLError(.badServerResponse))
        if let error {
            bodyWaiter?.resume(throwing: error)
        } else {
            bodyWaiter?.resume(returning: nil)
        }
    }

    /// With the lock held: records the response the first time one is there, and hands back the head's waiter to
    /// resume (outside the lock).
    private func takeHead(_ response: URLResponse?) -> (
        CheckedContinuation<HTTPURLResponse, any Error>, HTTPURLResponse
    )? {
        guard self.response == nil, let http = response as? HTTPURLResponse else { return nil }
        self.response = http
        guard let waiter = headWaiter else { return nil }
        headWaiter = nil
        return (waiter, http)
    }

    // MARK: Pulled by the caller

    /// The response head, once the first body bytes or the end arrived.
    func head() async throws -> HTTPURLResponse {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HTTPURLResponse, any Error>) in
            lock.lock()
            if let response {
                lock.unlock()
                continuation.resume(returning: response)
                return
            }
            if let ended {
                lock.unlock()
                switch ended {
                case .success: continuation.resume(throwing: URLError(.badServerResponse))
                case .failure(let error): continuation.resume(throwing: error)
                }
                return
            }
            headWaiter = continuation
            lock.unlock()
        }
    }

    /// The next chunk of the body, nil at its end; throws the task's error when it broke off.
    func next() async throws -> Data? {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Data?, any Error>) in
            lock.lock()
            if !chunks.isEmpty {
                let chunk = chunks.removeFirst()
                buffered -= chunk.count
                let resume = suspended && buffered <= (highWaterMark ?? 0) / 4
                if resume { suspended = false }
                lock.unlock()
                if resume { task.resume() }
                continuation.resume(returning: chunk)
                return
            }
            if let ended {
                lock.unlock()
                switch ended {
                case .success: continuation.resume(returning: nil)
                case .failure(let error): continuation.resume(throwing: error)
                }
                return
            }
            bodyWaiter = continuation
            lock.unlock()
        }
    }
}
