import FerryCore
import Foundation

/// The two questions a subscription asks the server: the dataset's partitions (`GET …/partitions`) and, for a key
/// not listed, why (`GET …/partitions/{key}/manifest`: 403 forbidden, 404 unknown, 410 retired).
struct PartitionServer: Sendable {
    let transport: any HTTPTransport
    /// `SERVER/v1/datasets`.
    let datasetsURL: URL
    let dataset: String
    /// Every request's headers (`Authorization`, `Ferry-Device`).
    let headers: [String: String]

    /// The most a listing may weigh (a 200-byte key and its version per partition: room for 50,000).
    static let listingLimit = 16 << 20

    /// `GET /v1/datasets/{dataset}/partitions`.
    func listing() async throws -> PartitionList {
        let url = datasetsURL.appendingPathComponent(dataset).appendingPathComponent("partitions")
        let tooLarge = FerryError(
            .corruptTransfer, "the partition list at \(url.absoluteString) is larger than \(Self.listingLimit) bytes")
        let (head, body) = try await transport.collect(
            TransportRequest(url: url, headers: headers.merging(["Accept": "application/json"]) { $1 }),
            limit: Self.listingLimit, over: tooLarge)
        switch head.status {
        case 200:
            do {
                let listing = try JSONDecoder().decode(PartitionList.self, from: body)
                guard listing.dataset == dataset else {
                    throw FerryError(
                        .verification, "\(url.absoluteString) lists dataset '\(listing.dataset)', not '\(dataset)'")
                }
                return listing
            } catch let error as FerryError {
                throw error
            } catch {
                throw FerryError(
                    .verification,
                    "\(url.absoluteString) answered a malformed partition list (\(error)); is Configuration.serverURL a Ferry server with partitions?",
                    underlying: error)
            }
        case 404:
            throw FerryError(
                .notFound,
                "dataset '\(dataset)' has no partitions on this server (\(ChangeUploadResponse.errorMessage(body))): check the dataset's name, or fetch it without subscribing",
                key: "dataset")
        default:
            throw refusal(head.status, url: url, body: body)
        }
    }

    /// Why `key`, absent from the listing, cannot be subscribed to: the error of its manifest's answer (403, 404,
    /// 410); nil when the server serves it after all (it appeared since the listing).
    func refusal(of key: String) async throws -> FerryError? {
        let url = PartitionStream.url(
            datasetsURL.appendingPathComponent(dataset),
            appending: PartitionStream.partition(key).pathSegments + ["manifest"])
        let (head, body) = try await transport.collect(TransportRequest(url: url, headers: headers), limit: 64 << 10)
        switch head.status {
        case 200, 304:
            return nil
        case 404:
            return FerryError(
                .notFound,
                "dataset '\(dataset)' has no partition '\(key)': check the key (`ferry subscribe` takes the partition table's key values)",
                key: key)
        case 410:
            return Self.retired(key, dataset: dataset)
        default:
            return refusal(head.status, url: url, body: body)
        }
    }

    /// A retired partition (410): its key disappeared from the dataset.
    static func retired(_ key: String, dataset: String) -> FerryError {
        FerryError(
            .partitionRetired,
            "partition '\(key)' of dataset '\(dataset)' was retired: unsubscribe from it (`ferry unsubscribe`, or unsubscribe(_:)); the rest of the device is unchanged",
            key: key)
    }

    private func refusal(_ status: Int, url: URL, body: Data) -> FerryError {
        guard status == 401 || status == 403 else {
            return ResponsePlan.failure(status: status, url: url.absoluteString)
        }
        var error = BearerAuthorization.refusal(status: status, url: url.absoluteString)
        if status == 403 { error.message += " (the server says: \(ChangeUploadResponse.errorMessage(body)))" }
        return error
    }
}

extension FerryError.Code {
    /// A subscribed partition was retired on the server (its key disappeared, HTTP 410): unsubscribe from it.
    public static let partitionRetired = Self("partition-retired")
}

extension SnapshotDownloader {
    /// The error for a 404 on a dataset's manifest: a partitioned dataset (error code `partitioned`) says to subscribe
    /// first; any other 404 is ``ResponsePlan/failure(_:url:)``'s.
    static func notServed(dataset: String, head: TransportResponseHead, url: URL, body: TransportResponseBody) async
        -> any Error
    {
        var data = Data()
        do {
            for try await chunk in body {
                data.append(chunk.prefix(SchemaRetired.bodyLimit - data.count))
                if data.count >= SchemaRetired.bodyLimit { break }
            }
        } catch {
            // The status says enough without the body: the plain 404 below.
            data = Data()
        }
        struct Envelope: Decodable {
            struct Inner: Decodable { var code: String }
            var error: Inner
        }
        // A body that is not Ferry's error JSON is any other 404, mapped as such.
        guard (try? JSONDecoder().decode(Envelope.self, from: data))?.error.code == "partitioned" else {
            return ResponsePlan.failure(head, url: url.absoluteString)
        }
        return FerryError(
            .notFound,
            "dataset '\(dataset)' is partitioned: subscribe to the partitions this device carries first (`ferry subscribe … KEY`, or subscribe(_:)), then fetch",
            key: "partition")
    }
}
