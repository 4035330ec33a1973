import ArgumentParser
import FerryClient
import FerryCore
import Foundation

/// `ferry rollback`: puts previous.db back as database.db.
struct RollbackCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rollback",
        abstract: "Put previous.db back as database.db; the rolled-back version is not downloaded again.")

    @OptionGroup var options: ClientDirectoryOptions

    @Flag(name: .long, help: "Print the result as one line of JSON.")
    var json = false

    func run() async throws {
        let result = try await options.withClient { try await $0.rollback() }
        if json {
            print(
                try JSONLine.render(
                    StatusAndOne(status: result.status, key: "rolledBackVersion", value: result.rolledBackVersion)))
        } else {
            print(
                "rolled back version \(result.rolledBackVersion.map(String.init) ?? "?") to version \(result.version.map(String.init) ?? "?")"
            )
            print(result.status.text)
        }
    }
}
