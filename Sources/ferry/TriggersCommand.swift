import ArgumentParser
import FerryCore
import FerryPostgres
import Foundation

/// `ferry triggers install|remove`: the change triggers that `schedule --on-change` and `serve --publish-on-change`
/// listen to (``ChangeTriggers``, docs/freshness.md).
struct TriggersCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "triggers",
        abstract: "Install or remove the triggers that tell Ferry when a template's source tables change.",
        subcommands: [Install.self, Remove.self])

    struct Options: ParsableArguments {
        @Option(name: .long, help: ArgumentHelp("Template file, e.g. templates/trips.yml.", valueName: "file"))
        var config: String

        @OptionGroup var database: DatabaseOption

        @Option(
            name: .long,
            help: ArgumentHelp(
                "Also cover this table (schema.table), e.g. one a query: or filter: reads (repeatable).",
                valueName: "table"))
        var also: [String] = []

        func connect() throws -> (Template, PostgresConnection) {
            let url = try database.url()
            for table in also where !(SQLIdentifier.isPlain(table) || SQLIdentifier.isQualified(table)) {
                throw ValidationError("--also '\(table)' is not a table name: write table or schema.table")
            }
            return (try Template.load(path: config), try PostgresConnection(url: url))
        }
    }

    struct Install: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: TriggersCommand.installAbstract)
        @OptionGroup var options: Options

        func run() throws {
            let (template, pg) = try options.connect()
            let tables = try ChangeTriggers.install(template, also: options.also, on: pg)
            print(
                "installed trigger \(ChangeTriggers.triggerName(for: template.dataset)) on \(tables.count) table\(tables.count == 1 ? "" : "s"), notifying channel \(ChangeTriggers.channel(for: template.dataset)):"
            )
            for table in tables { print("  covered: \(table)") }
            for note in ChangeTriggers.uncovered(in: template) { print("  not covered: \(note)") }
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: TriggersCommand.removeAbstract)
        @OptionGroup var options: Options

        func run() throws {
            let (template, pg) = try options.connect()
            let count = try ChangeTriggers.remove(template, also: options.also, on: pg).count
            print(
                "removed trigger \(ChangeTriggers.triggerName(for: template.dataset)) from \(count) table\(count == 1 ? "" : "s")"
            )
        }
    }

    static let installAbstract =
        "Add one function (ferry_notify) and one statement-level trigger per source table; running it again changes nothing."
    static let removeAbstract =
        "Drop the dataset's triggers, and the function once no dataset uses it; the database is left as before the install."
}
