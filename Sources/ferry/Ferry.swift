import ArgumentParser
import FerryCore
import Foundation

/// `ferry`: the command line. Each subcommand parses its arguments and calls a library target.
@main
struct Ferry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ferry",
        abstract: "Get a server's PostgreSQL data onto offline-capable devices, and their edits back.",
        version: "0.1.0",
        subcommands: [
            PublishCommand.self,
            ScheduleCommand.self,
            TriggersCommand.self,
            ServeCommand.self,
            FetchCommand.self, WatchCommand.self, ApplyCommand.self, StatusCommand.self, RollbackCommand.self,
            ExecCommand.self, PushCommand.self, SyncCommand.self, RejectedCommand.self, AttachCommand.self,
            AttachmentCommand.self, ExplainCommand.self, TokenCommand.self, SubscribeCommand.self,
            UnsubscribeCommand.self,
        ]
    )

    /// Exit codes: 0 success, 2 usage (ArgumentParser's own is 64), 1 failure with a one-line reason on stderr.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            if exitCode(for: error) == .validationFailure {
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(2)
            }
            // The library's errors name library settings; on the command line, name the options that fix them.
            exit(withError: CommandLineHints.adding(to: error))
        }
    }
}
