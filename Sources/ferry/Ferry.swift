import ArgumentParser

/// `ferry`: the command line. Each subcommand parses its arguments and calls a library target.
@main
struct Ferry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ferry",
        abstract: "Get a server's PostgreSQL data onto offline-capable devices, and their edits back.",
        version: "0.1.0",
        subcommands: [
            FetchCommand.self, ApplyCommand.self, StatusCommand.self, RollbackCommand.self,
        ]
    )
}
