import ArgumentParser
import FerryBucket
import FerryCore
import FerryService
import Foundation

/// What each publish keeps and how it builds: shared by `ferry publish`, `ferry schedule` and `ferry serve`'s
/// in-process publish, so all three take the same flags.
struct PublishOptions: ParsableArguments {
    @Option(
        name: .customLong("object-grace"),
        help: ArgumentHelp(
            "With --store s3://: how long an object stays in the bucket after no retained version names it (default 1h; 0s deletes at once).",
            valueName: "duration"), transform: Duration.argument())
    var objectGrace: Duration?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Checkpoints (versions stored as full files) to retain, with every version after the oldest of them.",
            valueName: "n"))
    var keep: Int = 5

    @Option(
        name: .customLong("checkpoint-at"),
        help: ArgumentHelp(
            "Store a version as full files once the patches since the last checkpoint pass this share of its gzip copy, e.g. 25% (the default); 0 stores every version in full.",
            valueName: "share"), transform: PublishOptions.share)
    var checkpointAt: Double = 0.25

    @Option(
        name: .customLong("checkpoint-every"),
        help: ArgumentHelp(
            "Also store a version as full files when the last checkpoint is this old (default 1d).",
            valueName: "duration"),
        transform: Duration.argument(in: .seconds(1) ... .longestSetting, expected: "1s to 366d"))
    var checkpointEvery: Duration = .seconds(86_400)

    @Option(
        name: .customLong("patch-horizon"),
        help: ArgumentHelp(
            "How long a device can stay away and still catch up by one patch, e.g. 30d (the default), 12h or 90m; 0 keeps no history beyond --keep.",
            valueName: "duration"), transform: Duration.argument())
    var patchHorizon: Duration = .seconds(30 * 86_400)

    @Flag(
        name: .customLong("no-patches"),
        help: "Do not write row-level patches from the retained versions (devices then take full downloads).")
    var noPatches = false

    @Flag(
        name: .customLong("full"),
        help:
            "Build every file from scratch instead of from the current version plus the row diff, and store it in full as a checkpoint (compacts the file)."
    )
    var full = false

    func validate() throws {
        guard keep >= 1 else { throw ValidationError("--keep must be at least 1: the current version is always kept") }
    }

    var policy: PublishPolicy {
        var policy = PublishPolicy()
        policy.keep = keep
        policy.patches = !noPatches
        policy.incremental = !full
        policy.checkpointAt = checkpointAt
        policy.checkpointEvery = checkpointEvery
        policy.patchHorizon = patchHorizon
        if let objectGrace { policy.objectGrace = objectGrace }
        return policy
    }

    /// The transform of `--checkpoint-at`: a percentage, `25%` or `25`, from 0 to 1000.
    static let share: @Sendable (String) throws -> Double = { text in
        let number = text.trimmingCharacters(in: .whitespaces)
        let digits = number.hasSuffix("%") ? String(number.dropLast()) : number
        guard let percent = Double(digits), percent.isFinite, percent >= 0, percent <= 1000 else {
            throw ValidationError("must be a percentage from 0% to 1000%, e.g. 25%")
        }
        return percent / 100
    }

    /// The flags given that only a store in a bucket takes.
    var bucketOnlyFlags: [String] { objectGrace != nil ? ["--object-grace"] : [] }
}

/// What `ferry publish` and `ferry schedule` publish, from where, into which store.
struct PublishTargetOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "Template file, e.g. templates/campgrounds.yml. Repeat it to publish one dataset in several schema lines, one template per schemaVersion (docs/schema-lines.md).",
            valueName: "file"))
    var config: [String] = []

    @OptionGroup var database: DatabaseOption

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Snapshot store: a directory, or a bucket s3://BUCKET/PREFIX (credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; region AWS_REGION, default us-east-1).",
            valueName: "dir|url"))
    var store: String = "snapshots"

    @OptionGroup var bucket: BucketOptions

    func validate() throws {
        guard !config.isEmpty else {
            throw ValidationError("missing --config FILE: the template to publish (e.g. --config templates/trips.yml)")
        }
        _ = try StoreLocation(flag: store)
    }

    /// The publish settings these flags and `options` name; the database URL defaults to `DATABASE_URL`.
    func settings(_ options: PublishOptions) throws -> PublishSettings {
        let location = try StoreLocation(flag: store, refusing: bucket.givenFlags + options.bucketOnlyFlags)
        var settings = PublishSettings(store: location, databaseURL: try database.url())
        settings.policy = options.policy
        settings.s3Endpoint = bucket.s3Endpoint
        settings.cacheDirectory = bucket.cacheDir.map { URL(fileURLWithPath: $0) }
        return settings
    }
}

/// `--debounce` and `--max-delay`: the timing of publishing on change, shared by `ferry schedule --on-change` and
/// `ferry serve --publish-on-change`.
struct OnChangeOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "Publishing on change: wait this long after the last notification (default 500ms).",
            valueName: "duration"), transform: Duration.argument(in: .zero ... .seconds(3600)))
    var debounce: Duration = .milliseconds(500)

    @Option(
        name: .customLong("max-delay"),
        help: ArgumentHelp(
            "Publishing on change: publish at most this long after the first notification (default 5s).",
            valueName: "duration"), transform: Duration.argument(in: .zero ... .seconds(3600)))
    var maxDelay: Duration = .seconds(5)

    /// On change with these timings (and `every` as the safety net), else at `every`, else nil.
    func trigger(onChange: Bool, every: Duration?) -> PublishTrigger? {
        if onChange { return .onChange(debounce: debounce, maxDelay: maxDelay, every: every) }
        return every.map { .interval($0) }
    }
}

extension StoreLocation {
    /// `--store` as a location; an unknown scheme, or `refusing` (flags that only a bucket takes) with a directory,
    /// is a usage error naming them.
    init(flag store: String, refusing bucketOnly: [String] = []) throws {
        do {
            self = try StoreLocation(parsing: store)
        } catch let error as FerryError {
            throw ValidationError(error.message)
        }
        if case .directory = self, !bucketOnly.isEmpty {
            throw ValidationError(
                "\(bucketOnly.joined(separator: ", ")) \(bucketOnly.count == 1 ? "needs" : "need") a bucket store (--store s3://BUCKET/PREFIX), not a directory: --store \(store)"
            )
        }
    }
}

extension Duration {
    /// The flag of an interval schedule (`--every`, `--publish-every`): at least a second.
    static let intervalArgument = Duration.argument(in: .seconds(1) ... .longestSetting, expected: "at least 1s")
}

/// `--database-url` of the commands that read PostgreSQL themselves (`publish`, `schedule`, `triggers`), with
/// `DATABASE_URL` as its default.
struct DatabaseOption: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("PostgreSQL URL (default: $DATABASE_URL).", valueName: "url"))
    var databaseURL: String?

    /// `--database-url`, else a non-empty `DATABASE_URL`; neither is a usage error saying how to give one.
    func url() throws -> String {
        guard let url = databaseURL ?? ProcessInfo.processInfo.environment["DATABASE_URL"], !url.isEmpty else {
            throw ValidationError("no database: pass --database-url postgres://user@host:5432/db or set DATABASE_URL")
        }
        return url
    }
}

/// `--s3-endpoint` and `--cache-dir`: how a command that publishes or serves reaches a store in a bucket.
struct BucketOptions: ParsableArguments {
    @Option(
        name: .customLong("s3-endpoint"),
        help: ArgumentHelp(
            "With --store s3://: the S3 server's URL (default: $AWS_ENDPOINT_URL, else AWS); path-style addressing.",
            valueName: "url"))
    var s3Endpoint: String?

    @Option(
        name: .customLong("cache-dir"),
        help: ArgumentHelp(
            "With --store s3://: the local cache. publish and schedule build in it (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ferry/s3/BUCKET/PREFIX); serve makes its temp directories of downloaded objects there, removed at exit (default: the system's temp directory). serve with a store directory: where it keeps the files it makes on request, versions built whole and catch-up patches (default: STORE/.ferry-cache).",
            valueName: "dir"))
    var cacheDir: String?

    /// The flags given, each of which only a store in a bucket takes.
    var givenFlags: [String] {
        [("--s3-endpoint", s3Endpoint != nil), ("--cache-dir", cacheDir != nil)].filter(\.1).map(\.0)
    }
}
