import ArgumentParser
import FerryClient
import FerryCore
import Foundation

/// `ferry apply`: swaps the pending updated.db in as database.db.
struct ApplyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apply",
        abstract: "Apply the pending update: updated.db becomes database.db, the old one is kept as previous.db.",
        discussion: "With nothing pending it changes nothing and says so (exit status 0).")

    @OptionGroup var options: ClientDirectoryOptions

    @Flag(name: .long, help: "Print the result as one line of JSON.")
    var json = false

    func run() async throws {
        let result = try await options.withClient { try await $0.applyPendingUpdate() }
        if json {
            print(try JSONLine.render(StatusAndOne(status: result.status, key: "applied", value: result.applied)))
        } else {
            print(result.text)
            print(result.status.text)
        }
    }
}
