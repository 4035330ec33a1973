import FerryCore
import Foundation
import Logging

extension FerryClient {
    /// Checks for updates until the calling task is cancelled, and calls `onUpdate` with each check that brought a
    /// new version (as ``checkForUpdates(progress:)`` leaves it: `database.db` on the first sync, `updated.db`
    /// after; apply it in `onUpdate` when the app wants it at once).
    ///
    /// With `Configuration.download.waitForChanges` each check is a long-poll: the server holds it until a new version
    /// exists, so the device learns of it within a second, with one request open. Without it, or against a server
    /// that ignores the wait (it answers at once and says no `Preference-Applied`), the loop asks once per
    /// `waitForChanges` (30 s when nil), or later when the server's `Retry-After` says so. Two checks never start
    /// less than a second apart. A failed check (offline, a server error) is retried after an exponential
    /// backoff with jitter, from 1 s up to a minute; a refused token or a bad configuration ends the loop with its
    /// error, and so does an error `onUpdate` throws.
    ///
    /// ```swift
    /// config.download.waitForChanges = .seconds(30)
    /// let client = try await FerryClient.open(configuration: config, logger: logger)
    /// let watching = Task { try await client.watch { _ in _ = try await client.applyPendingUpdate() } }
    /// // … later: watching.cancel()
    /// ```
    public func watch(_ onUpdate: @Sendable (FetchResult) async throws -> Void) async throws {
        var backoff = WatchPacing.Backoff()
        let pollInterval = configuration.download.waitForChanges ?? .seconds(30)
        while !Task.isCancelled {
            let started = ContinuousClock.now
            let result: FetchResult
            do {
                result = try await checkForUpdatesCancellingWithCaller()
            } catch is CancellationError {
                return
            } catch let error as FerryError where WatchPacing.endsTheLoop(error) {
                throw error
            } catch {
                if Task.isCancelled { return }
                let delay = backoff.next()
                logger.notice(
                    "check failed; retrying",
                    metadata: ["error": "\(error)", "seconds": "\(Double(delay.components.seconds))"])
                guard (try? await Task.sleep(for: delay)) != nil else { return }  // cancelled while sleeping: done
                continue
            }
            backoff.reset()
            if result.outcome != .notModified { try await onUpdate(result) }
            let pause = WatchPacing.pause(
                after: result, elapsed: ContinuousClock.now - started, pollInterval: pollInterval)
            if pause > .zero {
                // A cancelled pause ends the watch, as the caller asked.
                guard (try? await Task.sleep(for: pause)) != nil else { return }
            }
        }
    }
}

/// When ``FerryClient/watch(_:)`` asks again: the pure rules, tested without a server.
enum WatchPacing {
    /// The shortest time between the starts of two checks, whatever the server answers.
    static let minimumInterval: Duration = .seconds(1)

    /// How long to wait before the next check, after `result` took `elapsed`.
    /// - A new version: the next check at once (it long-polls for the one after), but never within a second.
    /// - Nothing new, the wait applied (`Preference-Applied`): again at once, as above.
    /// - Nothing new, no wait applied: `pollInterval` (or `Retry-After`, if longer) after the check started.
    static func pause(after result: FetchResult, elapsed: Duration, pollInterval: Duration) -> Duration {
        var interval = minimumInterval
        if result.outcome == .notModified && result.check.waitApplied == nil { interval = max(interval, pollInterval) }
        if let retryAfter = result.check.retryAfter { interval = max(interval, .seconds(retryAfter)) }
        return max(.zero, interval - elapsed)
    }

    /// Errors that retrying cannot fix: the configuration, a token the server refuses (a new one is needed), or
    /// schema lines the server has retired (a newer app build is).
    static func endsTheLoop(_ error: FerryError) -> Bool {
        [.badInput, .unauthorized, .schemaRetired].contains(error.code)
    }

    /// Exponential backoff with jitter: 1 s, 2 s, 4 s … up to `cap`, each drawn between half and all of it, so that
    /// devices that lost the server together do not come back together.
    struct Backoff {
        var base: Duration = .seconds(1)
        var cap: Duration = .seconds(60)
        var failures = 0
        var random: @Sendable (ClosedRange<Double>) -> Double = { Double.random(in: $0) }

        mutating func next() -> Duration {
            let exponent = min(failures, 16)
            failures += 1
            let ceiling = min(cap, base * (1 << exponent))
            return ceiling * random(0.5...1.0)
        }

        mutating func reset() { failures = 0 }
    }
}
