import ArgumentParser
import FerryCore
import FerryPublisher
import FerryService
import Foundation
import Logging

/// `ferry publish`: one snapshot of a template's tables into the store.
struct PublishCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "publish",
        abstract: "Publish a template's PostgreSQL tables as the next SQLite snapshot version.",
        discussion:
            "Exits 0 with \"unchanged\" when the data equals the latest version. Fails at once if another publish of the same dataset holds the store's lock."
    )

    @OptionGroup var target: PublishTargetOptions
    @OptionGroup var options: PublishOptions

    @Flag(name: .long, help: "Print the result as one JSON object.")
    var json = false

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Only this table changed (schema.table, repeatable): read only the template tables whose rows query reads one, and keep the others' rows from the current version.",
            valueName: "table"))
    var changed: [String] = []

    func validate() throws {
        _ = try target.settings(options)
    }

    func run() async throws {
        var logger = Logger(label: "ferry.publish")
        logger.logLevel = .warning
        var settings = try target.settings(options)
        settings.progress = TerminalProgress.makeIfTerminal()
        let publisher = try await usageError { try settings.publisher(templatePaths: target.config, logger: logger) }
        let result = try await publisher.publish(changedTables: changed.isEmpty ? nil : Set(changed))
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(result), as: UTF8.self))
        } else {
            print(result.text)
        }
    }
}

/// `body`, with the library's refusal of a setting combination (`FerryError.Code.badInput` naming the store) as a
/// usage error (exit 2): on the command line it is a wrong combination of flags.
func usageError<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as FerryError where error.code == .badInput && error.key == "store" {
        throw ValidationError(error.message)
    }
}
