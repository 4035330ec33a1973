import FerryBucket
import FerryCore
import FerryPostgres
import FerryPublisher
import Foundation
import Logging

/// How `ferry publish`, `ferry schedule` and `ferry serve`'s in-process publish write new versions: into which
/// store, how much history they keep, and how they build. One value for all three, so each publishes the same way.
///
/// ```swift
/// var settings = PublishSettings(store: try StoreLocation(parsing: "snapshots"), databaseURL: url)
/// settings.policy.keep = 3
/// let publishers = try settings.publishers(templatePaths: ["templates/trips.yml"], logger: logger)
/// let result = try await publishers[0].publisher.publish(changedTables: nil)
/// ```
public struct PublishSettings: Sendable {
    /// Where versions go: a directory, or a bucket (`s3://BUCKET/PREFIX`).
    public var store: StoreLocation
    /// libpq URL of the PostgreSQL database the templates read. Never printed unredacted.
    public var databaseURL: String
    /// What each publish keeps and how it builds.
    public var policy = PublishPolicy()
    /// With a bucket store: the S3 server's URL; nil takes `AWS_ENDPOINT_URL`, else AWS.
    public var s3Endpoint: String?
    /// With a bucket store: the local directory the publisher builds in (its working copy of the bucket). Nil takes
    /// ``BucketPublisher/defaultCacheDirectory(for:environment:)``.
    public var cacheDirectory: URL?
    /// Called as tables stream (from the publishing threads); nil for none.
    public var progress: (@Sendable (PublishProgress) -> Void)?

    public init(store: StoreLocation, databaseURL: String) {
        self.store = store
        self.databaseURL = databaseURL
    }

    /// One publisher per dataset of `templatePaths`, in the order the datasets first appear. The templates of one
    /// dataset are its schema lines and publish together. Throws `FerryError.Code.badInput` naming the file when a
    /// template cannot be read, and naming the dataset when schema lines would go into a bucket (not supported).
    public func publishers(templatePaths: [String], logger: Logger) throws -> [DatasetPublisher] {
        var paths: [(dataset: String, paths: [String])] = []
        for path in templatePaths {
            let dataset = try Template.load(path: path).dataset
            if let index = paths.firstIndex(where: { $0.dataset == dataset }) {
                paths[index].paths.append(path)
            } else {
                paths.append((dataset, [path]))
            }
        }
        return try paths.map { dataset, paths in
            DatasetPublisher(dataset: dataset, publisher: try publisher(dataset: dataset, paths: paths, logger: logger))
        }
    }

    /// One publisher for `templatePaths`: a template, or the schema lines of one dataset (the publish checks that
    /// they are).
    public func publisher(templatePaths: [String], logger: Logger) throws -> any Publishing {
        guard let first = templatePaths.first else {
            throw FerryError(.badInput, "no template to publish", key: "templatePaths")
        }
        return try publisher(dataset: try Template.load(path: first).dataset, paths: templatePaths, logger: logger)
    }

    /// The publisher of one dataset's templates (one, or its schema lines).
    func publisher(dataset: String, paths: [String], logger: Logger) throws -> any Publishing {
        var configuration = Publisher.Configuration(
            templatePath: paths[0], databaseURL: databaseURL, store: URL(fileURLWithPath: "."), keep: policy.keep)
        configuration.templatePaths = paths
        configuration.patches = policy.patches
        configuration.incremental = policy.incremental
        configuration.checkpointAt = policy.checkpointAt
        configuration.checkpointEvery = policy.checkpointEvery
        configuration.patchHorizon = policy.patchHorizon
        configuration.progress = progress
        switch store {
        case .directory(let directory):
            configuration.store = directory
            configuration.workDirectory = cacheDirectory
            return Publisher(configuration: configuration, logger: logger)
        case .bucket(let location):
            guard paths.count == 1 else {
                throw FerryError(
                    .badInput,
                    "schema lines (\(paths.count) templates of dataset '\(dataset)') are published into a store directory only, not into \(store) (docs/schema-lines.md)",
                    key: "store")
            }
            configuration.store = cacheDirectory ?? BucketPublisher.defaultCacheDirectory(for: location)
            return try BucketPublisher.fromEnvironment(
                configuration: configuration, location: location, endpoint: s3Endpoint, objectGrace: policy.objectGrace,
                logger: logger)
        }
    }
}

/// What each publish keeps and how it builds, the same for every store.
///
/// ```swift
/// var policy = PublishPolicy()
/// policy.keep = 3             // versions retained per dataset
/// policy.incremental = false  // build every file from scratch (`ferry publish --full`)
/// ```
public struct PublishPolicy: Sendable, Equatable {
    /// Checkpoints to retain per dataset (and per scope), at least 1, with every version after the oldest of them.
    /// Default 5.
    public var keep: Int = 5
    /// A version is stored as a step (the patch from the previous one) until the steps since the last checkpoint
    /// pass this share of its gzip copy; 0 stores every version in full. Default 0.25 (docs/delta.md).
    public var checkpointAt = 0.25
    /// A checkpoint is also cut when the last one is this old. Default one day.
    public var checkpointEvery: Duration = .seconds(86_400)
    /// How long the history a device catches up from by one patch is kept; zero keeps none beyond the retained
    /// versions. Default 30 days.
    public var patchHorizon: Duration = .seconds(30 * 86_400)
    /// Write row-level patches from the retained versions to each new one. Default true.
    public var patches = true
    /// Build a new file from the current version plus the row diff where possible; false builds from scratch.
    /// Default true.
    public var incremental = true
    /// With a bucket store: how long an object stays in the bucket after no retained version names it. Default 1 h.
    public var objectGrace: Duration = .seconds(3600)

    public init() {}
}

/// A dataset and the publisher of its templates (``PublishSettings/publishers(templatePaths:logger:)``).
public struct DatasetPublisher: Sendable {
    /// The templates' `dataset:`.
    public var dataset: String
    /// A ``Publisher`` into a directory, or a `BucketPublisher` into a bucket.
    public var publisher: any Publishing

    public init(dataset: String, publisher: any Publishing) {
        self.dataset = dataset
        self.publisher = publisher
    }
}
