import ArgumentParser
import FerryClient
import FerryCore
import Foundation

/// `ferry exec`: runs one SQL statement on the client database through the library, so writes are captured.
struct ExecCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "exec",
        abstract: "Run one SQL statement on DIR/database.db: selects print rows, writes are queued for upload.",
        discussion: """
            Writes to tables marked writable in the template are recorded in the outbox in the same transaction \
            (see docs/outbox.md); writes to read-only tables fail. Inserts into writable tables need a UUID text key.
            """)

    @OptionGroup var options: ClientDirectoryOptions

    @Argument(help: "One SQL statement.")
    var sql: String

    @Flag(name: .long, help: #"Print {"columns":[…],"rows":[[…]],"changes":N,"outbox":N} as one line of JSON."#)
    var json = false

    func run() async throws {
        let sql = self.sql
        let (result, waiting) = try await options.withClient { client in
            (try await client.execute(sql), try await client.pendingEdits())
        }
        if json {
            print(try JSONLine.render(ExecJSON(result: result, outbox: waiting)))
        } else if !result.columns.isEmpty {
            print(result.columns.joined(separator: "\t"))
            for row in result.rows { print(row.map(\.cellText).joined(separator: "\t")) }
        } else {
            print(
                "\(result.changes) row\(result.changes == 1 ? "" : "s") changed; \(waiting) local edit\(waiting == 1 ? "" : "s") waiting for upload"
            )
        }
    }
}
