import ArgumentParser
import FerryClient
import Foundation

/// `ferry status`: the client directory's sync state, versions and checksums.
struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the client directory's state (initialSyncRequired, upToDate, updatePending) and versions.",
        discussion: """
            --json prints {"state":…,"version":N|null,"sha256":…,"pendingVersion":N|null,"pendingSha256":…,"outbox":N,\
            "device":ID|null}: device is the id it sends as Ferry-Device (for ferry explain --device); a directory \
            subscribed to partitions adds "partitions":[{"key":…,"version":N|null,"rows":N}]. \
            Reads only; never applies anything.
            """)

    @OptionGroup var options: ClientDirectoryOptions

    @Flag(name: .long, help: "Print the status as one line of JSON.")
    var json = false

    func run() async throws {
        let status = try await FerryClient.status(directory: options.directoryURL, logger: options.logger())
        let device = try await FerryClient.storedDeviceID(directory: options.directoryURL)
        print(json ? try JSONLine.render(StatusCommandJSON(status: status, device: device)) : status.text)
    }
}
