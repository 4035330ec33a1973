import FerryCore
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Attachment uploads over a ``URLSessionTransport``'s session: the default ``AttachmentTransport`` (a private CA set
/// on the transport applies to uploads too). A body is read from its file one `PATCH` at a time, at most
/// ``maxBodyBytes`` (default 8 MiB) per request, so memory stays flat however big the attachment; an upload cut
/// midway resumes from what the server holds.
///
/// ```swift
/// config.attachments.transport = URLSessionAttachmentTransport(transport: URLSessionTransport.shared)
/// ```
public struct URLSessionAttachmentTransport: AttachmentTransport {
    public var transport: URLSessionTransport
    public var maxBodyBytes: Int64?
    /// The longest one request may take. Default 5 minutes.
    public var timeout: Duration

    public init(
        transport: URLSessionTransport = .shared, maxBodyBytes: Int64 = 8 << 20, timeout: Duration = .seconds(300)
    ) {
        self.transport = transport
        self.maxBodyBytes = max(maxBodyBytes, 64 << 10)
        self.timeout = timeout
    }

    public func send(_ request: AttachmentRequest) async throws -> AttachmentResponse {
        var urlRequest = URLRequest(url: request.url, timeoutInterval: URLSessionTransport.seconds(timeout))
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers.sorted(by: { $0.key < $1.key }) {
            urlRequest.setValue(value, forHTTPHeaderField: name)
        }
        if let body = request.body {
            let data = try await BlockingWork.run { try Self.read(body) }
            urlRequest.httpBody = data
        }
        let url = request.url.absoluteString
        return try await transport.exchange(urlRequest, for: .upload) { head, body in
            var data = Data()
            do {
                for try await chunk in body where data.count < AttachmentResponse.bodyLimit {
                    data.append(chunk.prefix(AttachmentResponse.bodyLimit - data.count))
                }
            } catch {
                throw TransportFailure.error(error, url: url, exchange: .upload, answerBegan: true)
            }
            return AttachmentResponse(head: head, body: data)
        }
    }

    /// The body's bytes, read from its file (at most ``maxBodyBytes`` of them, as the uploader asks).
    static func read(_ body: AttachmentRequest.Body) throws -> Data {
        guard let handle = FileHandle(forReadingAtPath: body.file.path) else {
            throw FerryError(.io, "cannot open the attachment to upload", path: body.file.path)
        }
        defer { try? handle.close() }  // read-only: closing cannot lose data
        do {
            try handle.seek(toOffset: UInt64(body.offset))
            let data = try handle.read(upToCount: Int(body.length)) ?? Data()
            guard data.count == body.length else {
                throw FerryError(.io, "the attachment is shorter than its queue entry says", path: body.file.path)
            }
            return data
        } catch let error as FerryError {
            throw error
        } catch {
            throw FerryError(
                .io, "cannot read the attachment to upload: \(error.localizedDescription)", path: body.file.path)
        }
    }
}
