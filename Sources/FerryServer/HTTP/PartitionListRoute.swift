import FerryCore
import Foundation
import HTTPTypes
import Hummingbird

/// `GET /v1/datasets/{dataset}/partitions`: a partitioned dataset's layout, its shared stream's version and the
/// partitions the caller may read (``PartitionList``), so a device can check keys before it subscribes and knows
/// where each table's rows belong (docs/partitions.md). 404 `not_found` for a dataset that is not partitioned.
enum PartitionListRoute {
    static func respond(_ request: Request, context: BasicRequestContext, access: DatasetAccess, head: Bool)
        async throws -> Response
    {
        let name = try access.resolve(request, dataset: try SnapshotResponder.datasetName(context))
        guard let partitions = access.catalog.partitions(name),
            case .scoped(let views) = access.catalog.access(name)
        else {
            throw ServerError(
                .notFound, code: .notFound,
                "dataset '\(name)' has no partitions on this server (not published, or published without `partition:`)")
        }
        access.catalog.devices.record(request.headers, dataset: name)
        let readable = try await access.readablePartitions(request, dataset: name, layout: partitions.layout)
        let streams = views.keys.filter { $0 != PartitionLayout.sharedStream && readable?.contains($0) ?? true }
            .sorted().map { PartitionList.Stream(key: $0, version: views[$0]!.manifest.version) }
        let list = PartitionList(
            dataset: name, layout: partitions.layout,
            shared: views[PartitionLayout.sharedStream].map { .init(key: nil, version: $0.manifest.version) },
            partitions: streams)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        headers[.cacheControl] = partitions.layout.access == true ? "private, no-cache" : "no-cache"
        let body = ByteBuffer(bytes: try encoder.encode(list))
        let response = Response(status: .ok, headers: headers, body: .init(byteBuffer: body))
        return head ? response.createHeadResponse() : response
    }
}
