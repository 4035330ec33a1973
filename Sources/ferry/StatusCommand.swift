import ArgumentParser
import FerryClient
import Foundation

/// `ferry status`: the client directory's sync state, versions and checksums.
struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the client directory's state (initialSyncRequired, upToDate, updatePending) and versions.",
        discussion: """
            --json prints {"state":…,"version":N|null,"sha256":…,"pendingVersion":N|null,"pendingSha256":…,"outbox":N}. \
            Reads only; never applies anything.
            """)

    @OptionGroup var options: ClientDirectoryOptions

    @Flag(name: .long, help: "Print the status as one line of JSON.")
    var json = false

    func run() async throws {
        let status = try await FerryClient.status(directory: options.directoryURL, logger: options.logger())
        print(json ? try JSONLine.render(StatusCommandJSON(status: status)) : status.text)
    }
}
