import ArgumentParser
import FerryBucket
import FerryCore
import FerryPublisher
import Foundation
import Logging

/// `ferry publish`: one snapshot of a template's tables into the store.
struct PublishCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "publish",
        abstract: "Publish a template's PostgreSQL tables as the next SQLite snapshot version.",
        discussion:
            "Exits 0 with \"unchanged\" when the data equals the latest version. Fails at once if another publish of the same dataset holds the store's lock."
    )

    @OptionGroup var options: PublishOptions

    @Flag(name: .long, help: "Print the result as one JSON object.")
    var json = false

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Only this table changed (schema.table, repeatable): read only the template tables whose rows query reads one, and keep the others' rows from the current version.",
            valueName: "table"))
    var changed: [String] = []

    func run() async throws {
        var logger = Logger(label: "ferry.publish")
        logger.logLevel = .warning
        var configuration = try options.configuration()
        configuration.progress = TerminalProgress.makeIfTerminal()
        let result = try await options.publisher(configuration: configuration, logger: logger).publish(
            changedTables: changed.isEmpty ? nil : Set(changed))
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(result), as: UTF8.self))
        } else {
            print(result.text)
        }
    }
}

/// Options shared by `publish` and `schedule`.
struct PublishOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "Template file, e.g. templates/campgrounds.yml. Repeat it to publish one dataset in several schema lines, one template per schemaVersion (docs/schema-lines.md).",
            valueName: "file"))
    var config: [String] = []

    @Option(name: .long, help: ArgumentHelp("PostgreSQL URL (default: $DATABASE_URL).", valueName: "url"))
    var databaseURL: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Snapshot store: a directory, or a bucket s3://BUCKET/PREFIX (credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; region AWS_REGION, default us-east-1).",
            valueName: "dir|url"))
    var store: String = "snapshots"

    @Option(
        name: .customLong("s3-endpoint"),
        help: ArgumentHelp(
            "With --store s3://: the S3 server's URL (default: $AWS_ENDPOINT_URL, else AWS); path-style addressing.",
            valueName: "url"))
    var s3Endpoint: String?

    @Option(
        name: .customLong("cache-dir"),
        help: ArgumentHelp(
            "With --store s3://: the local cache the publisher builds in (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ferry/s3/BUCKET/PREFIX).",
            valueName: "dir"))
    var cacheDir: String?

    @Option(
        name: .customLong("object-grace"),
        help: ArgumentHelp(
            "With --store s3://: how long an object stays in the bucket after no retained version names it (default 1h; 0s deletes at once).",
            valueName: "duration"), transform: ObjectGrace.argument)
    var objectGrace: Duration?

    @Option(name: .long, help: ArgumentHelp("Versions to retain.", valueName: "n"))
    var keep: Int = 5

    @Flag(
        name: .customLong("no-patches"),
        help: "Do not write row-level patches from the retained versions (devices then take full downloads).")
    var noPatches = false

    @Flag(
        name: .customLong("full"),
        help: "Build every file from scratch instead of from the current version plus the row diff (compacts the file)."
    )
    var full = false

    func validate() throws {
        guard !config.isEmpty else {
            throw ValidationError("missing --config FILE: the template to publish (e.g. --config templates/trips.yml)")
        }
        guard keep >= 1 else { throw ValidationError("--keep must be at least 1: the current version is always kept") }
        try validateStore()
    }

    /// `--store` takes a directory or a bucket; the bucket's options need a bucket.
    func validateStore() throws {
        let location: StoreLocation
        do {
            location = try StoreLocation(parsing: store)
        } catch let error as FerryError {
            throw ValidationError(error.message)
        }
        if case .directory = location {
            let given = [
                ("--s3-endpoint", s3Endpoint != nil), ("--cache-dir", cacheDir != nil),
                ("--object-grace", objectGrace != nil),
            ].filter(\.1).map(\.0)
            if !given.isEmpty {
                throw ValidationError(
                    "\(given.joined(separator: ", ")) only go with a store in a bucket (--store s3://BUCKET/PREFIX); "
                        + "--store \(store) is a directory")
            }
        }
    }

    /// The publisher of this store: into the directory, or into the bucket through the cache directory.
    func publisher(configuration: Publisher.Configuration, logger: Logger) throws -> any Publishing {
        guard case .bucket(let location) = try StoreLocation(parsing: store) else {
            return Publisher(configuration: configuration, logger: logger)
        }
        if config.count > 1 {
            throw ValidationError(
                "--store \(store): schema lines (several --config) are published into a store directory only; a bucket is not built yet (docs/schema-lines.md)"
            )
        }
        var configuration = configuration
        configuration.store =
            cacheDir.map { URL(fileURLWithPath: $0) } ?? BucketPublisher.defaultCacheDirectory(for: location)
        return try BucketPublisher.fromEnvironment(
            configuration: configuration, location: location, endpoint: s3Endpoint,
            objectGrace: objectGrace ?? .seconds(3600), logger: logger)
    }

    /// `--store` takes a directory. A bucket (`s3://BUCKET/PREFIX`, issue 24) is not wired in yet, and any other URL
    /// would otherwise become a local directory named `scheme:`, silently: refuse both, saying what exists.
    static func validateStoreDirectory(_ store: String) throws {
        let location: StoreLocation
        do {
            location = try StoreLocation(parsing: store)
        } catch let error as FerryError {
            throw ValidationError(error.message)
        }
        if case .bucket = location {
            throw ValidationError(
                "--store \(store): a store in a bucket (s3://) is not built yet (docs/s3.md); give a directory")
        }
    }

    func configuration() throws -> Publisher.Configuration {
        guard let url = databaseURL ?? ProcessInfo.processInfo.environment["DATABASE_URL"], !url.isEmpty else {
            throw ValidationError("no database: pass --database-url postgres://user@host:5432/db or set DATABASE_URL")
        }
        var configuration = Publisher.Configuration(
            templatePath: config[0], databaseURL: url, store: URL(fileURLWithPath: store), keep: keep)
        configuration.templatePaths = config
        configuration.patches = !noPatches
        configuration.incremental = !full
        return configuration
    }
}

/// Draws one progress line per table on stderr, only when stderr is a terminal.
enum TerminalProgress {
    static func makeIfTerminal() -> (@Sendable (PublishProgress) -> Void)? {
        guard isatty(STDERR_FILENO) == 1 else { return nil }
        return { p in
            if let scope = p.scope {
                // Scopes export in parallel: one finished line per table, no redrawn line.
                guard p.finished else { return }
                let line = String(format: "scope %@ · %@: %d rows in %.2fs\n", scope, p.table, p.rows, p.seconds)
                FileHandle.standardError.write(Data(line.utf8))
                return
            }
            let rate = p.seconds > 0 ? "\(Int(p.rowsPerSecond)) rows/s" : ""
            let line =
                "\r\u{1B}[K\(p.table): \(p.rows) rows \(rate)"
                + (p.finished ? String(format: " in %.2fs\n", p.seconds) : "")
            FileHandle.standardError.write(Data(line.utf8))
        }
    }
}

/// `--object-grace`: a whole number followed by s, m, h or d; 0s is allowed.
enum ObjectGrace {
    static func argument(_ text: String) throws -> Duration {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
        if let unit = trimmed.last, let factor = units[unit], let n = Int64(trimmed.dropLast()), n >= 0,
            n <= 365 * 86400
        {
            return .seconds(n * factor)
        }
        throw ValidationError("--object-grace \(text): write a whole number followed by s, m, h or d, e.g. 1h or 0s")
    }
}
