import ArgumentParser
import FerryClient
import Foundation

/// `ferry unsubscribe`: removes partitions from the device's set.
struct UnsubscribeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unsubscribe",
        abstract: "Remove partitions from the client directory's set (needs no server).",
        discussion: """
            A key not subscribed is an error naming it, and nothing changes. The next `ferry fetch` removes their rows \
            from DIR/database.db, except rows a queued edit still names: they stay until the edit is answered. \
            Exit status: 0 success, 1 failure (reason on stderr), 2 usage.
            """)

    @OptionGroup var options: ClientDirectoryOptions

    @Flag(name: .long, help: "Print the subscribed keys as one line of JSON.")
    var json = false

    @Argument(help: "The partitions' keys.")
    var keys: [String]

    func run() async throws {
        let subscribed = try await options.withClient { client in
            try await client.unsubscribe(keys)
            return await client.subscriptions
        }
        print(try SubscribeCommand.render(subscribed, json: json, dir: options.dir))
    }
}
