import FerryCore
import Foundation
import Logging

/// Downloads attachments with `GET …/attachments/{sha256}` over the client's ``HTTPTransport``: the body is
/// hashed as it is written to a temp file, fsynced, and renamed under its name only when its SHA-256 matches.
struct AttachmentDownloader: Sendable {
    let store: DeviceAttachments
    let transport: any HTTPTransport
    /// `SERVER/v1/datasets/DATASET/attachments`.
    let base: URL
    let commonHeaders: @Sendable () async throws -> [String: String]

    /// Downloads `sha256` unless the device holds it; returns the bytes received (0 when it was there).
    /// Throws `.notFound` when the server does not hold it, `.verification` when the bytes do not match.
    func download(_ sha256: String) async throws -> Int64 {
        try DeviceAttachments.requireID(sha256)
        if store.contains(sha256) { return 0 }
        try await BlockingWork.run { [store] in try store.makeDirectories() }
        let url = base.appendingPathComponent(sha256)
        let request = TransportRequest(url: url, headers: try await commonHeaders())
        let writer = try await VerifiedFileWriter.open(store.temporaryURL(), .new, lane: BlockingWork.lane)
        do {
            let got = try await transport.send(request) { head, body in
                switch head.status {
                case 200: break
                case 404:
                    throw FerryError(.notFound, "the server does not hold the attachment", key: sha256)
                case 401, 403: throw BearerAuthorization.refusal(status: head.status, url: url.absoluteString)
                default:
                    throw FerryError(
                        .network, "the server failed the attachment's download (\(head.status))", key: sha256)
                }
                for try await chunk in body { try await writer.append(chunk) }
                return try await writer.finish(expecting: .init(sha256: sha256))
            }
            try await writer.commit(to: store.url(for: sha256))
            return got.size
        } catch {
            await writer.discard()
            throw error
        }
    }
}
