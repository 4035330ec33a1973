import FerryPostgres
import FerryPublisher
import Logging
import ServiceLifecycle

/// When a schedule publishes: at an interval, or when the source tables change (with an interval as the safety net).
///
/// ```swift
/// let trigger = PublishTrigger.onChange(debounce: .milliseconds(500), maxDelay: .seconds(5), every: .seconds(900))
/// let services = trigger.schedules(for: publishers, logger: logger)
/// ```
public enum PublishTrigger: Sendable, Equatable {
    /// A publish every `Duration` (at least 1 s), the first at once.
    case interval(Duration)
    /// A publish `debounce` after the last change notification of `ferry triggers install`'s triggers, at most
    /// `maxDelay` after the first; with `every`, also when that long has passed without one.
    case onChange(debounce: Duration, maxDelay: Duration, every: Duration?)

    /// The default notification timing of ``onChange(debounce:maxDelay:every:)``: 500 ms and 5 s.
    public static func onChange(every: Duration? = nil) -> PublishTrigger {
        .onChange(debounce: .milliseconds(500), maxDelay: .seconds(5), every: every)
    }

    /// One schedule service per dataset. `onRun` is called after each publish with the dataset and its outcome.
    public func schedules(
        for publishers: [DatasetPublisher], logger: Logger,
        onRun: (@Sendable (_ dataset: String, Result<PublishResult, any Error>) -> Void)? = nil
    ) -> [any Service] {
        var services: [any Service] = []
        for entry in publishers {
            let dataset = entry.dataset
            let report: (@Sendable (Result<PublishResult, any Error>) -> Void)?
            if let onRun {
                report = { outcome in onRun(dataset, outcome) }
            } else {
                report = nil
            }
            switch self {
            case .interval(let every):
                services.append(
                    PublishSchedule(publisher: entry.publisher, every: every, logger: logger, onRun: report))
            case .onChange(let debounce, let maxDelay, let every):
                let onChangeRun: (@Sendable (OnChangeSchedule.Reason, Result<PublishResult, any Error>) -> Void)?
                if let report {
                    onChangeRun = { _, outcome in report(outcome) }
                } else {
                    onChangeRun = nil
                }
                services.append(
                    OnChangeSchedule(
                        publisher: entry.publisher, channel: ChangeTriggers.channel(for: dataset), debounce: debounce,
                        maxDelay: maxDelay, every: every, logger: logger, onRun: onChangeRun))
            }
        }
        return services
    }
}
