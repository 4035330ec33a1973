import ArgumentParser
import FerryClient
import FerryCore
import Foundation

/// `ferry subscribe`: adds partitions of a partitioned dataset to the device's set.
struct SubscribeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "subscribe",
        abstract: "Add partitions of a partitioned dataset to the client directory's set (downloads nothing).",
        discussion: """
            Checks the keys with the server at once (GET /v1/datasets/DATASET/partitions): an unknown key (not-found), \
            a key the token may not read (unauthorized, the server's 403) or a retired one (partition-retired) is an \
            error naming it, and nothing changes. The next `ferry fetch` (or sync, watch) brings the shared tables and \
            every subscribed partition into DIR/database.db. \
            Exit status: 0 success, 1 failure (reason on stderr), 2 usage.
            """)

    @OptionGroup var server: ServerOptions

    @OptionGroup var access: AccessOptions

    @OptionGroup var options: ClientDirectoryOptions

    @Flag(name: .long, help: "Print the subscribed keys as one line of JSON.")
    var json = false

    @Argument(help: "The partitions' keys (the partition table's key values).")
    var keys: [String]

    func run() async throws {
        let subscribed = try await access.withHTTPClient { http in
            let configuration = try server.clientConfiguration(
                directory: options.directoryURL, access: access, http: http)
            let client = try await FerryClient.open(configuration: configuration, logger: options.logger())
            do {
                try await client.subscribe(keys)
                let subscribed = await client.subscriptions
                await client.close()
                return subscribed
            } catch {
                await client.close()
                throw error
            }
        }
        print(try Self.render(subscribed, json: json, dir: options.dir))
    }

    /// `subscribed: 1, 7; run ferry fetch …` or `{"subscriptions":["1","7"]}`.
    static func render(_ keys: [String], json: Bool, dir: String) throws -> String {
        if json { return try JSONLine.render(["subscriptions": keys]) }
        let list = keys.isEmpty ? "no partitions" : keys.joined(separator: ", ")
        return "subscribed: \(list); the next `ferry fetch --dir \(dir) …` brings them up to date"
    }
}
