import FerryCore
import FerryStore
import HTTPTypes
import NIOCore

/// The lane of the server's whole-file work done on request (docs/delta.md, "What a server does per version"): a
/// version's file built for a client that asks for it whole, and a catch-up patch merged from the history. Each job
/// runs on a thread of its own (`ThreadJob`), at most ``slots`` at once (default: half the cores, at least one);
/// at most ``maxWaiting`` more wait for a slot, and a job past that is refused with `503` and `Retry-After`, so
/// requests never become an unbounded queue of CPU and memory. Downloads, revalidations and the catalog's reloads
/// never wait on it: they use `NIOThreadPool.singleton`, which this lane never touches.
///
/// ```swift
/// let lane = BuildLane(slots: 1, maxWaiting: 64)
/// let sha = try await lane.run(.merge, dataset: "trips", name: "ferry-merge") { try merge() }
/// ```
final class BuildLane: Sendable {
    /// What a job does, counted apart on the status page.
    enum Kind: String, Sendable, CaseIterable {
        case build, merge
    }

    /// Jobs running and waiting, per kind.
    struct Counts: Sendable, Equatable, Codable {
        var running = 0
        var waiting = 0
    }

    private struct State {
        var running = 0
        var waiters: [CheckedContinuation<Void, Never>] = []
        var counts: [String: [Kind: Counts]] = [:]
    }

    /// Jobs running at once.
    let slots: Int
    /// Jobs waiting for a slot at most; one more is refused.
    let maxWaiting: Int
    /// Seconds a refused request is told to wait (`Retry-After`).
    let retryAfter: Int
    private let state = Locked(State())

    init(slots: Int = BuildLane.defaultSlots, maxWaiting: Int = 256, retryAfter: Int = 2) {
        self.slots = max(1, slots)
        self.maxWaiting = max(0, maxWaiting)
        self.retryAfter = retryAfter
    }

    /// Half the cores, at least one.
    static var defaultSlots: Int { max(1, System.coreCount / 2) }

    /// Runs `body` on a thread of its own once a slot is free; throws `503` at once when ``maxWaiting`` jobs
    /// already wait.
    func run<T: Sendable>(
        _ kind: Kind, dataset: String, name: String, _ body: @escaping @Sendable () throws -> T
    ) async throws -> T {
        try await acquire(kind, dataset: dataset)
        defer { release(kind, dataset: dataset) }
        return try await ThreadJob.run(name: name, body)
    }

    /// Running and waiting jobs of dataset `dataset`, per kind.
    func counts(dataset: String) -> [Kind: Counts] { state.withLock { $0.counts[dataset] ?? [:] } }

    private func acquire(_ kind: Kind, dataset: String) async throws {
        enum Admission { case now, wait, refuse }
        let admission: Admission = state.withLock { state in
            if state.running < slots {
                state.running += 1
                state.counts[dataset, default: [:]][kind, default: Counts()].running += 1
                return .now
            }
            guard state.waiters.count < maxWaiting else { return .refuse }
            state.counts[dataset, default: [:]][kind, default: Counts()].waiting += 1
            return .wait
        }
        switch admission {
        case .now:
            return
        case .refuse:
            var headers = HTTPFields()
            headers[.retryAfter] = String(retryAfter)
            throw ServerError(
                .serviceUnavailable, code: "busy",
                "the server is busy building files on request (\(slots) at once, \(maxWaiting) waiting); retry after \(retryAfter) s",
                headers: headers)
        case .wait:
            // The slot is handed over by `release`, which counts this job as running before it resumes it.
            await withCheckedContinuation { continuation in
                let resumeNow: Bool = state.withLock { state in
                    if state.running < slots {
                        state.running += 1
                        return true
                    }
                    state.waiters.append(continuation)
                    return false
                }
                if resumeNow { continuation.resume() }
            }
            state.withLock { state in
                state.counts[dataset, default: [:]][kind, default: Counts()].waiting -= 1
                state.counts[dataset, default: [:]][kind, default: Counts()].running += 1
            }
        }
    }

    private func release(_ kind: Kind, dataset: String) {
        let next: CheckedContinuation<Void, Never>? = state.withLock { state in
            state.counts[dataset, default: [:]][kind, default: Counts()].running -= 1
            if state.waiters.isEmpty {
                state.running -= 1
                return nil
            }
            // The slot passes to the oldest waiter: `running` stays as it is.
            return state.waiters.removeFirst()
        }
        next?.resume()
    }
}
