import ArgumentParser
import FerryCore
import FerryPostgres
import FerryService
import Foundation
import Logging
import ServiceLifecycle
import UnixSignals

/// `ferry schedule`: publish at an interval until SIGTERM/SIGINT.
struct ScheduleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schedule",
        abstract:
            "Publish a template at a fixed interval, or when its source tables change, until stopped (SIGTERM/SIGINT stop it between runs).",
        discussion: """
            Runs once at start, then every interval. A failed run is logged and retried at the next tick; runs never overlap. \
            With --on-change it publishes when the triggers of `ferry triggers install` notify a change: --debounce after \
            the last notification, at most --max-delay after the first; --every is then the safety net.
            """
    )

    @OptionGroup var target: PublishTargetOptions
    @OptionGroup var options: PublishOptions

    @Option(
        name: .long,
        help: ArgumentHelp("Interval: a number followed by s, m, h or d (e.g. 15m).", valueName: "duration"),
        transform: Duration.intervalArgument)
    var every: Duration?

    @Flag(name: .customLong("on-change"), help: "Publish when a source table changes (needs `ferry triggers install`).")
    var onChange = false

    @OptionGroup var timing: OnChangeOptions

    func validate() throws {
        guard every != nil || onChange else { throw ValidationError("pass --every DURATION, --on-change, or both") }
        _ = try target.settings(options)
    }

    func run() async throws {
        var logger = Logger(label: "ferry.schedule")
        logger.logLevel = .info
        let settings = try target.settings(options)
        let publisher = try await usageError { try settings.publisher(templatePaths: target.config, logger: logger) }
        guard let trigger = timing.trigger(onChange: onChange, every: every) else {
            throw ValidationError("pass --every DURATION, --on-change, or both")
        }
        let dataset = DatasetPublisher(dataset: try Template.load(path: target.config[0]).dataset, publisher: publisher)
        let group = ServiceGroup(
            services: trigger.schedules(for: [dataset], logger: logger), gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger)
        try await group.run()
    }
}
