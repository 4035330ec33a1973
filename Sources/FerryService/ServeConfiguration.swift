import FerryBucket
import FerryServer
import Foundation

/// Everything `ferry serve` runs, in one value: the HTTP server, where its store lives, and an optional in-process
/// publish. ``ServerAssembly`` builds and runs it; the CLI only fills it from flags.
///
/// ```swift
/// var configuration = ServeConfiguration(
///     server: ServerConfiguration(storePath: URL(fileURLWithPath: "snapshots")),
///     store: try StoreLocation(parsing: "snapshots"))
/// configuration.server.database = .init(templatePaths: [template], databaseURL: url)
/// configuration.publishing = .init(trigger: .interval(.seconds(30)))
/// let assembly = try await ServerAssembly.start(configuration, logger: logger)
/// try await assembly.run()
/// ```
public struct ServeConfiguration: Sendable {
    /// The HTTP server: address, limits, TLS, status token, and the templates and database behind the changes
    /// endpoint (``ServerConfiguration/database``). With a bucket store its `storePath` is replaced by the replica's
    /// cache.
    public var server: ServerConfiguration
    /// Where the store lives: a directory the server reads, or a bucket it keeps a verified replica of.
    public var store: StoreLocation
    /// How a bucket store is read; ignored for a directory.
    public var bucket = BucketSettings()
    /// Publish the database's templates into the store from this process; nil (default) serves what other
    /// publishers write. Needs ``ServerConfiguration/database``.
    public var publishing: InProcessPublishing?

    public init(server: ServerConfiguration, store: StoreLocation) {
        self.server = server
        self.store = store
    }

    /// How the server reads a store in a bucket (docs/s3.md).
    public struct BucketSettings: Sendable {
        /// The S3 server's URL; nil takes `AWS_ENDPOINT_URL`, else AWS.
        public var endpoint: String?
        /// How often each manifest is read (a conditional GET). Default 2 s.
        public var manifestPoll: Duration = .seconds(2)
        /// Where the temp directories of downloaded objects and of an in-process publisher are made (removed at
        /// exit); nil: the system's temp directory.
        public var cacheParent: URL?
        /// Name a presigned URL of each object in the object lookup (`Ferry-Object-URL`), so a cache fills from the
        /// bucket rather than from this replica. Default false.
        public var presignObjects = false

        public init() {}
    }

    /// A publish schedule run beside the server, over the templates of ``ServerConfiguration/database``.
    public struct InProcessPublishing: Sendable {
        /// When to publish.
        public var trigger: PublishTrigger
        /// What each publish keeps and how it builds.
        public var policy = PublishPolicy()

        public init(trigger: PublishTrigger, policy: PublishPolicy = PublishPolicy()) {
            self.trigger = trigger
            self.policy = policy
        }
    }
}
