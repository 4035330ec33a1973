import FerryCore
import Logging
import ServiceLifecycle

/// Publishes at a fixed interval as a swift-service-lifecycle `Service` (`ferry schedule`, `ferry serve
/// --publish-every`).
///
/// The first run starts at once; later runs start on ticks `start + k × interval`. Runs never overlap: a run that
/// overruns skips the ticks it missed. A failed run is logged and retried at the next tick; the loop keeps going.
/// A graceful shutdown (SIGTERM/SIGINT through a `ServiceGroup`) ends the wait between runs, or lets a running
/// publish finish first, then `run()` returns.
///
/// ```swift
/// let schedule = PublishSchedule(publisher: publisher, every: .seconds(15 * 60), logger: logger)
/// let group = ServiceGroup(services: [schedule], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
/// try await group.run()
/// ```
public struct PublishSchedule: Service {
    public let publisher: any Publishing
    /// The time between two runs' starts (at least 1 s).
    public let interval: Duration
    let logger: Logger
    let period: Duration
    let onRun: (@Sendable (Result<PublishResult, any Error>) -> Void)?

    /// - Parameter onRun: called after every run with its outcome (for metrics, tests, or a status page).
    public init(
        publisher: any Publishing, every interval: Duration, logger: Logger,
        onRun: (@Sendable (Result<PublishResult, any Error>) -> Void)? = nil
    ) {
        self.init(publisher: publisher, period: max(interval, .seconds(1)), logger: logger, onRun: onRun)
    }

    /// Any period, including sub-second ones (tests).
    init(
        publisher: any Publishing, period: Duration, logger: Logger,
        onRun: (@Sendable (Result<PublishResult, any Error>) -> Void)?
    ) {
        self.publisher = publisher
        self.interval = period
        self.period = period
        self.logger = logger
        self.onRun = onRun
    }

    public func run() async throws {
        let clock = ContinuousClock()
        var tick = clock.now
        logger.info(
            "publish schedule started",
            metadata: ["template": "\(publisher.configuration.templatePath)", "every": "\(interval.shortDescription)"])
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            let outcome = await publisher.publishLogging(
                changedTables: nil, label: "scheduled publish", retry: "tick", logger: logger)
            onRun?(outcome)

            let now = clock.now
            repeat { tick = tick.advanced(by: period) } while tick <= now
            let next = tick
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(until: next, clock: ContinuousClock()) }
            } catch {
                break  // graceful shutdown or cancellation during the wait
            }
        }
        logger.info("publish schedule stopped")
    }
}
