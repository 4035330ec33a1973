/// What a schedule runs: a ``Publisher`` into a store directory, or FerryBucket's `BucketPublisher` into a bucket.
public protocol Publishing: Sendable {
    /// The publish's configuration (its `store` is the local store, or the bucket publisher's cache).
    var configuration: Publisher.Configuration { get }
    /// Publishes once; `changedTables` as in ``Publisher/publish(changedTables:)``.
    func publish(changedTables: Set<String>?) async throws -> PublishResult
}

extension Publisher: Publishing {}
