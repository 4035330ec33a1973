import ArgumentParser
import Foundation

/// `ferry`: the command line. Each subcommand parses its arguments and calls a library target.
@main
struct Ferry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ferry",
        abstract: "Get a server's PostgreSQL data onto offline-capable devices, and their edits back.",
        version: "0.1.0",
        subcommands: [
            ServeCommand.self,
            FetchCommand.self, ApplyCommand.self, StatusCommand.self, RollbackCommand.self,
        ]
    )

    /// Runs the command; usage errors (ArgumentParser's ValidationError, exit 64 by default) exit 2 as Ferry's
    /// contract says: 0 success, 1 failure, 2 usage.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            let code = exitCode(for: error)
            if code == .validationFailure {
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(2)
            }
            exit(withError: error)
        }
    }
}
