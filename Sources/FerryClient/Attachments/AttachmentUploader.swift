import FerryCore
import Foundation
import Logging

/// Uploads the queued attachments with tus 1.0.0 (docs/http-api.md): `HEAD` the attachment (already held: done),
/// else `POST` an upload (its URL saved in the queue entry at once), then `PATCH` the bytes from the offset the
/// server holds. An interrupted upload resumes: `HEAD` on the saved URL says how many bytes arrived, and only the
/// rest is sent (a `404` there starts again with `POST`). An entry leaves the queue only once the server holds it.
struct AttachmentUploader: Sendable {
    let store: DeviceAttachments
    let transport: any HTTPTransport
    /// `SERVER/v1/datasets/DATASET/attachments`.
    let base: URL
    /// The headers every request carries: `Authorization` (asked afresh each time) and `Ferry-Device`.
    let commonHeaders: @Sendable () async throws -> [String: String]
    let attempts: Int
    let backoff: Duration
    let logger: Logger

    /// How many times a PATCH answered 409 without an offset (the server still receiving an earlier one) is tried
    /// again, waiting 0.25 s, 0.5 s, … up to 4 s between (about 20 s in all), before the push gives up on it.
    static let busyRetries = 8

    /// Attachments uploaded at once: while one is fsynced and renamed by the server, the next are on the wire, and
    /// the round trips of each (`HEAD`, `POST`, `PATCH`) overlap.
    static let uploadsInFlight = 3

    /// How one attachment's upload ended.
    private enum Outcome: Sendable {
        case uploaded
        /// Still queued: no longer found in the queue when its turn came, or its upload failed (the reason).
        case stillQueued(String?)
        case offline(FerryError)
        case unauthorized(FerryError)
    }

    /// Uploads every queued attachment, oldest first, ``uploadsInFlight`` at a time. A failure other than a refused
    /// token leaves that attachment queued and goes on (offline: the ones not started yet are left for the next push
    /// at once).
    func uploadAll() async throws -> AttachmentPushSummary {
        let entries = try await BlockingWork.run { [store, logger] in
            try store.queued { logger.warning("\($0)") }
        }
        var summary = AttachmentPushSummary()
        var offline = false
        func pending(_ entry: QueuedAttachment) {
            summary.pending += 1
            summary.pendingBytes += entry.size
            summary.pendingIDs.insert(entry.sha256)
        }
        // Bytes the server confirmed count even when the upload broke off later (it resumes from them).
        func settle(_ done: (QueuedAttachment, Int64, Outcome)) throws {
            let (entry, sent, outcome) = done
            summary.bytes += sent
            switch outcome {
            case .uploaded: summary.uploaded += 1
            case .unauthorized(let error): throw error
            case .offline(let error):
                if !offline {
                    logger.notice("offline: attachments stay queued", metadata: ["error": "\(error.message)"])
                }
                offline = true
                pending(entry)
            case .stillQueued(let reason):
                if let reason {
                    logger.warning(
                        "attachment upload failed; it stays queued",
                        metadata: ["sha256": "\(entry.sha256)", "error": "\(reason)"])
                }
                pending(entry)
            }
        }
        try await withThrowingTaskGroup(of: (QueuedAttachment, Int64, Outcome).self) { group in
            for (index, entry) in entries.enumerated() {
                if index >= Self.uploadsInFlight, let done = try await group.next() { try settle(done) }
                guard !offline else {
                    pending(entry)
                    continue
                }
                group.addTask {
                    let (sent, outcome) = await attempt(entry)
                    return (entry, sent, outcome)
                }
            }
            while let done = try await group.next() { try settle(done) }
        }
        return summary
    }

    /// One attachment's upload, retried as ``uploadRetrying(_:sent:)`` does: the bytes the server confirmed, and how
    /// it ended.
    private func attempt(_ entry: QueuedAttachment) async -> (Int64, Outcome) {
        var sent: Int64 = 0
        do {
            let uploaded = try await uploadRetrying(entry.sha256, sent: &sent)
            return (sent, uploaded ? .uploaded : .stillQueued(nil))
        } catch let error as FerryError where error.code == .unauthorized {
            return (sent, .unauthorized(error))
        } catch let error as FerryError where error.code == .offline {
            return (sent, .offline(error))
        } catch {
            return (sent, .stillQueued("\(error)"))
        }
    }

    /// Uploads one queued attachment, retrying a broken exchange with backoff (each attempt resumes); false when it
    /// is no longer queued. `sent` counts the body bytes the server confirmed.
    func uploadRetrying(_ sha256: String, sent: inout Int64) async throws -> Bool {
        var delay = backoff
        var attempt = 1
        while true {
            do {
                guard let entry = try await BlockingWork.run({ [store] in try store.entry(sha256) }) else {
                    return false
                }
                try await upload(entry, sent: &sent)
                return true
            } catch let error as FerryError where TransportFailure.isWorthRetrying(error) && attempt < attempts {
                logger.notice(
                    "attachment upload broke off; resuming",
                    metadata: ["sha256": "\(sha256)", "attempt": "\(attempt)", "error": "\(error.message)"])
                try await Task.sleep(for: delay)
                delay *= 2
                attempt += 1
            }
        }
    }

    /// One attempt; `sent` counts the bytes the server confirmed, across attempts. An upload the server lost
    /// (404 on its URL) starts again once with `POST`.
    private func upload(_ queued: QueuedAttachment, sent: inout Int64, restarted: Bool = false) async throws {
        var entry = queued
        let sha256 = entry.sha256
        let file = store.url(for: sha256)
        guard FileManager.default.fileExists(atPath: file.path) else {
            // A crash inside an add, between the queue entry and the file's rename: nothing was attached.
            try await BlockingWork.run { [store] in try store.dequeue(sha256) }
            return
        }
        let held = try await send(TransportRequest(method: "HEAD", url: base.appendingPathComponent(sha256)))
        if held.head.status == 200 {
            try await BlockingWork.run { [store] in try store.dequeue(sha256) }
            return
        }
        guard held.head.status == 404 else { throw failure(held, "asking whether the server holds an attachment") }
        var offset = try await resumeOffset(&entry)
        if offset == nil { offset = try await create(&entry) }
        guard var offset, let location = entry.uploadURL.flatMap({ URL(string: $0, relativeTo: base)?.absoluteURL })
        else {
            throw FerryError(.network, "the server made no upload for the attachment; it stays queued", key: sha256)
        }
        var busy = 0
        // The server stores the attachment when a PATCH brings the upload to its length, and answers only then.
        // Held whole but not stored (the store failed after the last byte arrived), the upload takes an empty PATCH
        // at its length, which stores it: dequeuing without one would leave the server without the photo.
        var stored = false
        while !stored {
            let length = min(entry.size - offset, transport.maxBodyBytes ?? entry.size)
            let response = try await send(
                TransportRequest(
                    method: "PATCH", url: location,
                    headers: [
                        Attachment.Tus.uploadOffset: "\(offset)", "Content-Type": Attachment.Tus.patchContentType,
                    ],
                    body: length > 0 ? .file(file, offset: offset, length: length) : .data(Data()),
                    timeout: .seconds(300)))
            switch response.head.status {
            case 204, 200:
                let next = response.head.header(Attachment.Tus.uploadOffset).flatMap { Int64($0) } ?? offset + length
                sent += max(0, next - offset)
                offset = next
                stored = offset >= entry.size
            case 409:
                if response.head.header(Attachment.Tus.uploadOffset) == nil {
                    // The server is still receiving an earlier PATCH of this upload: a cut link it has not noticed
                    // yet (it notices within its idle timeout). Wait, longer each time, rather than ask in a loop.
                    busy += 1
                    guard busy <= Self.busyRetries else {
                        throw FerryError(
                            .network,
                            "the server is still receiving an earlier upload of the attachment; it stays queued, and the next push resumes it",
                            key: sha256)
                    }
                    try await Task.sleep(for: .milliseconds(min(250 << (busy - 1), 4000)))
                }
                guard let held = try await resumeOffset(&entry) else {
                    return try await restart(entry, sent: &sent, restarted: restarted)
                }
                offset = held
            case 404, 410:
                entry.uploadURL = nil
                try await save(entry)
                return try await restart(entry, sent: &sent, restarted: restarted)
            case 422:
                throw FerryError(
                    .verification,
                    "the server found the uploaded bytes do not match their SHA-256: the device's copy is damaged; remove it and attach the file again",
                    path: file.path, key: sha256)
            default:
                throw failure(response, "uploading an attachment")
            }
        }
        try await BlockingWork.run { [store] in try store.dequeue(sha256) }
    }

    private func restart(_ entry: QueuedAttachment, sent: inout Int64, restarted: Bool) async throws {
        guard !restarted else {
            throw FerryError(
                .network, "the server lost the attachment's upload twice; it stays queued", key: entry.sha256)
        }
        try await upload(entry, sent: &sent, restarted: true)
    }

    /// The offset the server holds of the entry's upload; nil (and the URL forgotten) when it has none.
    private func resumeOffset(_ entry: inout QueuedAttachment) async throws -> Int64? {
        guard let text = entry.uploadURL, let url = URL(string: text, relativeTo: base)?.absoluteURL else { return nil }
        let response = try await send(TransportRequest(method: "HEAD", url: url))
        switch response.head.status {
        case 200, 204:
            guard let offset = response.head.header(Attachment.Tus.uploadOffset).flatMap({ Int64($0) }) else {
                throw FerryError(
                    .network, "the server's upload answer has no Upload-Offset; the attachment stays queued")
            }
            return offset
        case 404, 410:
            entry.uploadURL = nil
            try await save(entry)
            return nil
        default:
            throw failure(response, "resuming an attachment upload")
        }
    }

    /// `POST`s a new upload and saves its URL in the queue entry at once; returns its offset.
    private func create(_ entry: inout QueuedAttachment) async throws -> Int64 {
        let metadata =
            "sha256 \(Data(entry.sha256.utf8).base64EncodedString()),contentType \(Data(entry.contentType.utf8).base64EncodedString())"
        let response = try await send(
            TransportRequest(
                method: "POST", url: base.appendingPathComponent("uploads"),
                headers: [Attachment.Tus.uploadLength: "\(entry.size)", Attachment.Tus.uploadMetadata: metadata]))
        guard response.head.status == 201, let location = response.head.header("Location") else {
            throw failure(response, "starting an attachment upload")
        }
        entry.uploadURL = location
        try await save(entry)
        return response.head.header(Attachment.Tus.uploadOffset).flatMap { Int64($0) } ?? 0
    }

    private func save(_ entry: QueuedAttachment) async throws {
        try await BlockingWork.run { [store] in try store.update(entry) }
    }

    /// Sends `request` with the tus and common headers; the answer's body is kept up to 64 KiB (an error's message).
    private func send(_ request: TransportRequest) async throws -> (head: TransportResponseHead, body: Data) {
        var request = request
        request.headers[Attachment.Tus.resumable] = Attachment.Tus.version
        for (name, value) in try await commonHeaders() { request.headers[name] = value }
        return try await transport.collect(request, limit: 64 << 10)
    }

    /// The error for an answer the upload cannot go on with.
    private func failure(_ response: (head: TransportResponseHead, body: Data), _ doing: String) -> FerryError {
        let status = response.head.status
        let message = ChangeUploadResponse.errorMessage(response.body)
        switch status {
        case 401, 403:
            return BearerAuthorization.refusal(status: status, url: base.absoluteString)
        case 413:
            return FerryError(
                .badInput, "the server takes no attachment this large (413): \(message); it stays queued")
        case 400..<500 where status != 408 && status != 429:
            return FerryError(.badInput, "the server refused \(doing) (\(status)): \(message); it stays queued")
        default:
            return FerryError(.network, "the server failed \(doing) (\(status)): \(message); it stays queued")
        }
    }
}

/// What a push did with the attachments: uploaded, and still queued.
///
/// ```swift
/// let result = try await client.push()
/// print(result.attachments.uploaded, result.attachments.pending)
/// ```
public struct AttachmentPushSummary: Sendable, Equatable {
    /// Attachments the server holds now that it did not before this push (or that it held already: not counted).
    public var uploaded = 0
    /// Body bytes the server confirmed receiving.
    public var bytes: Int64 = 0
    /// Attachments still queued.
    public var pending = 0
    /// Their bytes.
    public var pendingBytes: Int64 = 0
    /// Their SHA-256s: the edits naming one wait for the next push.
    public var pendingIDs: Set<String> = []

    public init() {}
}
