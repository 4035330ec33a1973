import Logging

/// What a schedule runs: a ``Publisher`` into a store directory, or FerryBucket's `BucketPublisher` into a bucket.
public protocol Publishing: Sendable {
    /// The publish's configuration (its `store` is the local store, or the bucket publisher's cache).
    var configuration: Publisher.Configuration { get }
    /// Publishes once; `changedTables` as in ``Publisher/publish(changedTables:)``.
    func publish(changedTables: Set<String>?) async throws -> PublishResult
}

extension Publisher: Publishing {}

extension Publishing {
    /// Publishes once for a schedule and logs the outcome as `label: unchanged` or `label: new version` (with the
    /// dataset, version and seconds), or as `label failed; retrying at the next …` naming `retry`. `metadata` goes on
    /// every line (a publish on change adds its reason).
    func publishLogging(
        changedTables: Set<String>?, label: String, retry: String, metadata: Logger.Metadata = [:], logger: Logger
    ) async -> Result<PublishResult, any Error> {
        do {
            let result = try await publish(changedTables: changedTables)
            logger.info(
                "\(label): \(result.unchanged ? "unchanged" : "new version")",
                metadata: metadata.merging(
                    [
                        "dataset": "\(result.dataset)", "version": "\(result.version)",
                        "seconds": "\(result.seconds)",
                    ], uniquingKeysWith: { $1 }))
            return .success(result)
        } catch {
            logger.error(
                "\(label) failed; retrying at the next \(retry)",
                metadata: metadata.merging(["error": "\(error)"], uniquingKeysWith: { $1 }))
            return .failure(error)
        }
    }
}
