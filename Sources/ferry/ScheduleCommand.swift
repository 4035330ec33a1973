import ArgumentParser
import FerryCore
import FerryPublisher
import Foundation
import Logging
import ServiceLifecycle
import UnixSignals

/// `ferry schedule`: publish at an interval until SIGTERM/SIGINT.
struct ScheduleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schedule",
        abstract: "Publish a template at a fixed interval until stopped (SIGTERM/SIGINT stop it between runs).",
        discussion: "Runs once at start, then every interval. A failed run is logged and retried at the next tick; runs never overlap."
    )

    @OptionGroup var options: PublishOptions

    @Option(
        name: .long, help: ArgumentHelp("Interval: a whole number followed by s, m or h (e.g. 15m).", valueName: "duration"),
        transform: PublishInterval.argument)
    var every: PublishInterval

    func run() async throws {
        var logger = Logger(label: "ferry.schedule")
        logger.logLevel = .info
        let publisher = Publisher(configuration: try options.configuration(), logger: logger)
        let schedule = PublishSchedule(publisher: publisher, every: every, logger: logger)
        let group = ServiceGroup(services: [schedule], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await group.run()
    }
}
