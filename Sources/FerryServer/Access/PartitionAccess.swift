import FerryCore
import Foundation
import HTTPTypes
import Hummingbird

/// Which stream of a partitioned dataset a request reads, and whether its token may (docs/partitions.md).
///
/// A stream is named by the path: `/v1/datasets/{dataset}/shared/…` or `/v1/datasets/{dataset}/partitions/{key}/…`,
/// the key percent-encoded as one segment. With `partition.access`, the token check answers the keys the token may
/// read, one per line (``encode(_:)``), and is cached like a scope's.
enum PartitionAccess {
    /// The route prefixes of a stream, after `/v1/datasets/{dataset}`: the read routes are registered under each.
    static let routePrefixes = ["", "/shared", "/partitions/{partition}"]

    /// The keys a token may read, as the one string a ``TokenCheck`` caches: sorted, one per line (a key never
    /// holds a control character, ``PartitionLayout/isValidKey(_:)``).
    static func encode(_ keys: Set<String>) -> String {
        keys.sorted().joined(separator: "\n")
    }

    /// The keys of an ``encode(_:)``d answer.
    static func decode(_ answer: String) -> Set<String> {
        Set(answer.split(separator: "\n", omittingEmptySubsequences: true).map(String.init))
    }

    /// The stream `path` names (its scope value: ``PartitionLayout/sharedStream`` or the key), or nil when the path
    /// names none (a dataset route).
    static func stream(inPath path: String) -> String? {
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        guard segments.count >= 4, segments[0] == "v1", segments[1] == "datasets" else { return nil }
        switch segments[3] {
        case "shared": return PartitionLayout.sharedStream
        case "partitions" where segments.count >= 6:
            return String(segments[4]).removingPercentEncoding
        default: return nil
        }
    }

    static func notPartitionRoute(_ dataset: String) -> ServerError {
        ServerError(
            .notFound, code: "partitioned",
            "dataset '\(dataset)' is partitioned: read /v1/datasets/\(dataset)/shared/… and /v1/datasets/\(dataset)/partitions/{key}/… (list: /v1/datasets/\(dataset)/partitions)"
        )
    }

    static func unknownPartition(_ key: String, dataset: String, retired: Bool) -> ServerError {
        let shown = String(key.prefix(PartitionLayout.maxKeyBytes)).debugDescription
        return retired
            ? ServerError(
                .gone, code: "gone", "partition \(shown) of dataset '\(dataset)' was retired: unsubscribe from it")
            : ServerError(.notFound, code: .notFound, "dataset '\(dataset)' has no partition \(shown)")
    }
}

extension DatasetAccess {
    /// The keys of dataset `name` that `request`'s token may read; nil when the dataset is public. 401 without a
    /// valid token, 503 when the server cannot check tokens for it.
    func readablePartitions(_ request: Request, dataset name: String, layout: PartitionLayout) async throws
        -> Set<String>?
    {
        guard layout.access == true else { return nil }
        return PartitionAccess.decode(try await scope(of: request, dataset: name))
    }

    /// The view of the stream `request`'s path names, on partitioned dataset `name` whose scoped views are `views`:
    /// 404 `partitioned` for a dataset route, 404 or 410 for a key with no stream, 403 for a key the token may not
    /// read.
    func partitionView(
        _ request: Request, dataset name: String, views: [String: SnapshotCatalog.SnapshotView],
        partitions: (layout: PartitionLayout, retired: Set<String>)
    ) async throws -> (view: SnapshotCatalog.SnapshotView, scope: String?, dataset: String) {
        guard let key = PartitionAccess.stream(inPath: request.uri.path) else {
            throw PartitionAccess.notPartitionRoute(name)
        }
        if let readable = try await readablePartitions(request, dataset: name, layout: partitions.layout),
            key != PartitionLayout.sharedStream, !readable.contains(key)
        {
            throw BearerRefusal.insufficientScope(
                dataset: name, description: "the token may not read partition \(key.prefix(64).debugDescription)")
        }
        guard let view = views[key] else {
            throw PartitionAccess.unknownPartition(key, dataset: name, retired: partitions.retired.contains(key))
        }
        return (view, key, name)
    }
}
