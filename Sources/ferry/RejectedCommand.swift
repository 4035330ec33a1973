import ArgumentParser
import FerryClient
import FerryCore
import Foundation

/// `ferry rejected`: the local edits the server did not take (rejected, merged with lost columns, or gone), and
/// their resolution.
struct RejectedCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rejected",
        abstract: "List the local edits the server rejected, merged in part or found gone; resubmit or discard them.",
        discussion: """
            An edit is kept after a push until it is resolved: `resubmit` queues a new edit on top of the server's \
            row (pushed by the next `ferry push`), `discard` keeps the server's row.
            """,
        subcommands: [RejectedListCommand.self, RejectedResubmitCommand.self, RejectedDiscardCommand.self])

    /// The kept edit `id`, or an error that names it.
    static func kept(_ id: String, in client: FerryClient) async throws -> RejectedEdit {
        guard let edit = try await client.rejectedEdits().first(where: { $0.id == id }) else {
            throw FerryError(.notFound, "no rejected edit has id '\(id)'; `ferry rejected list` shows them", key: id)
        }
        return edit
    }
}

/// `ferry rejected list`.
struct RejectedListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "Print each kept edit: id, table, key, lost columns and the server's values.")

    @OptionGroup var options: ClientDirectoryOptions

    @Flag(
        name: .long,
        help: #"Print {"edits":[{"id","table","key","values","serverValues","lostColumns",…}]} as one line of JSON."#)
    var json = false

    func run() async throws {
        let edits = try await options.withClient { try await $0.rejectedEdits() }
        if json {
            print(try JSONLine.render(RejectedJSON(edits: edits)))
            return
        }
        guard !edits.isEmpty else {
            print("no rejected edits")
            return
        }
        for edit in edits {
            print(try edit.text)
        }
    }
}

/// `ferry rejected resubmit ID --set col=value`.
struct RejectedResubmitCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resubmit",
        abstract: "Queue a kept edit again with the given values, on top of the server's row; forget the old one.",
        discussion: """
            Each --set value is read as JSON when it is JSON (4, 2.5, true, null, "text"), else as text. A kept \
            delete without --set is queued again as a delete. The next `ferry push` uploads it.
            """)

    @OptionGroup var options: ClientDirectoryOptions

    @Argument(help: "The id of the kept edit (see `ferry rejected list`).")
    var id: String

    @Option(name: .customLong("set"), help: "A column and its new value, col=value (repeatable).")
    var assignments: [String] = []

    @Flag(name: .long, help: #"Print {"resubmitted":ID,"change":NEW_ID} as one line of JSON."#)
    var json = false

    func run() async throws {
        var parsed: [String: JSONValue] = [:]
        for assignment in assignments {
            guard let equals = assignment.firstIndex(of: "="), equals != assignment.startIndex else {
                throw ValidationError("--set needs col=value, got '\(assignment)'")
            }
            let column = String(assignment[..<equals])
            guard parsed[column] == nil else { throw ValidationError("--set names column '\(column)' twice") }
            parsed[column] = Self.value(String(assignment[assignment.index(after: equals)...]))
        }
        let (id, values) = (self.id, parsed)
        let change = try await options.withClient { client -> String in
            let edit = try await RejectedCommand.kept(id, in: client)
            return try await client.resubmit(edit, values: values)
        }
        if json {
            print(try JSONLine.render(ResubmitJSON(resubmitted: id, change: change)))
        } else {
            print("resubmitted \(id) as change \(change); `ferry push` uploads it")
        }
    }

    /// `4` → 4, `"a"` → a, `true` → true, `null` → null; anything that is not JSON is text.
    static func value(_ text: String) -> JSONValue {
        // Not JSON is not an error here: the text itself is the value.
        (try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))) ?? .string(text)
    }
}

/// `ferry rejected discard ID`.
struct RejectedDiscardCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "discard", abstract: "Forget a kept edit and keep the server's row.")

    @OptionGroup var options: ClientDirectoryOptions

    @Argument(help: "The id of the kept edit (see `ferry rejected list`).")
    var id: String

    @Flag(name: .long, help: #"Print {"discarded":ID} as one line of JSON."#)
    var json = false

    func run() async throws {
        let id = self.id
        try await options.withClient { client in
            let edit = try await RejectedCommand.kept(id, in: client)
            try await client.discard(edit)
        }
        print(json ? try JSONLine.render(DiscardJSON(discarded: id)) : "discarded \(id); the server's row stays")
    }
}
