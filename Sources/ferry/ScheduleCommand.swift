import ArgumentParser
import FerryCore
import FerryPostgres
import FerryPublisher
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

    @OptionGroup var options: PublishOptions

    @Option(
        name: .long,
        help: ArgumentHelp("Interval: a whole number followed by s, m or h (e.g. 15m).", valueName: "duration"),
        transform: PublishInterval.argument)
    var every: PublishInterval?

    @Flag(name: .customLong("on-change"), help: "Publish when a source table changes (needs `ferry triggers install`).")
    var onChange = false

    @Option(
        name: .long,
        help: ArgumentHelp(
            "With --on-change: wait this long after the last notification (default 500ms).", valueName: "duration"),
        transform: ShortDuration.argument)
    var debounce: Duration = .milliseconds(500)

    @Option(
        name: .customLong("max-delay"),
        help: ArgumentHelp(
            "With --on-change: publish at most this long after the first notification (default 5s).",
            valueName: "duration"), transform: ShortDuration.argument)
    var maxDelay: Duration = .seconds(5)

    func validate() throws {
        guard every != nil || onChange else { throw ValidationError("pass --every DURATION, --on-change, or both") }
    }

    func run() async throws {
        var logger = Logger(label: "ferry.schedule")
        logger.logLevel = .info
        let publisher = try options.publisher(configuration: try options.configuration(), logger: logger)
        let service: any Service
        if onChange {
            let template = try Template.load(path: options.config[0])
            service = OnChangeSchedule(
                publisher: publisher, channel: ChangeTriggers.channel(for: template.dataset), debounce: debounce,
                maxDelay: maxDelay,
                every: every?.duration, logger: logger)
        } else if let every {
            service = PublishSchedule(publisher: publisher, every: every, logger: logger)
        } else {
            throw ValidationError("pass --every DURATION, --on-change, or both")
        }
        let group = ServiceGroup(services: [service], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await group.run()
    }
}
