import AsyncHTTPClient
import FerryClient
import FerryCore
import Foundation
import NIOCore
import NIOHTTP1

/// Attachment uploads over AsyncHTTPClient: one `PATCH` carries the whole rest of an attachment, streamed from its
/// file in 1 MiB chunks (memory stays flat). The CLI's uploader; an app uses FerryClient's
/// ``URLSessionAttachmentTransport``.
///
/// ```swift
/// config.attachments.transport = HTTPAttachmentTransport(httpClient: http)
/// ```
public struct HTTPAttachmentTransport: AttachmentTransport {
    public var httpClient: HTTPClient
    /// The longest one request may take, body included. Default 1 hour.
    public var timeout: TimeAmount
    public var maxBodyBytes: Int64? { nil }

    public init(httpClient: HTTPClient = .shared, timeout: TimeAmount = .hours(1)) {
        self.httpClient = httpClient
        self.timeout = timeout
    }

    public func send(_ request: AttachmentRequest) async throws -> AttachmentResponse {
        let url = request.url.absoluteString
        var httpRequest = HTTPClientRequest(url: url)
        httpRequest.method = HTTPMethod(rawValue: request.method)
        for (name, value) in request.headers.sorted(by: { $0.key < $1.key }) {
            httpRequest.headers.add(name: name, value: value)
        }
        if let body = request.body {
            httpRequest.body = .stream(FileChunks(body: body), length: .known(body.length))
        }
        let response: HTTPClientResponse
        do {
            response = try await httpClient.execute(httpRequest, timeout: timeout)
        } catch {
            throw NIOTransportFailure.error(error, url: url, exchange: .upload)
        }
        var data = Data()
        do {
            for try await buffer in response.body where data.count < AttachmentResponse.bodyLimit {
                data.append(Data(buffer.readableBytesView.prefix(AttachmentResponse.bodyLimit - data.count)))
            }
        } catch {
            throw NIOTransportFailure.error(error, url: url, exchange: .upload, answerBegan: true)
        }
        return AttachmentResponse(head: SnapshotResponseHead(response), body: data)
    }
}

/// A file's byte range as 1 MiB buffers, read off the cooperative threads.
struct FileChunks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let body: AttachmentRequest.Body

    func makeAsyncIterator() -> Iterator { Iterator(body: body) }

    final class Iterator: AsyncIteratorProtocol {
        let body: AttachmentRequest.Body
        var handle: FileHandle?
        var remaining: Int64

        init(body: AttachmentRequest.Body) {
            self.body = body
            remaining = body.length
        }

        deinit { try? handle?.close() }  // read-only: closing cannot lose data

        func next() async throws -> ByteBuffer? {
            guard remaining > 0 else { return nil }
            let body = self.body
            let count = Int(Swift.min(remaining, 1 << 20))
            let opened = handle
            let (file, data) = try await BlockingWork.run { () throws -> (FileHandleBox, Data) in
                let file: FileHandle
                if let opened {
                    file = opened
                } else {
                    guard let handle = FileHandle(forReadingAtPath: body.file.path) else {
                        throw FerryError(.io, "cannot open the attachment to upload", path: body.file.path)
                    }
                    try handle.seek(toOffset: UInt64(body.offset))
                    file = handle
                }
                let data = try file.read(upToCount: count) ?? Data()
                return (FileHandleBox(file), data)
            }
            handle = file.handle
            guard data.count == count else {
                throw FerryError(.io, "the attachment is shorter than its queue entry says", path: body.file.path)
            }
            remaining -= Int64(count)
            return ByteBuffer(bytes: data)
        }
    }
}

/// A file handle handed from the thread pool back to the iterator that owns it (used by one caller at a time).
struct FileHandleBox: @unchecked Sendable {
    let handle: FileHandle
    init(_ handle: FileHandle) { self.handle = handle }
}

extension SnapshotResponseHead {
    /// The status and headers of an AsyncHTTPClient response (names lowercased, repeated ones joined with ", ").
    init(_ response: HTTPClientResponse) {
        var headers: [String: String] = [:]
        for field in response.headers {
            let name = field.name.lowercased()
            headers[name] = headers[name].map { "\($0), \(field.value)" } ?? field.value
        }
        self.init(status: Int(response.status.code), headers: headers)
    }
}
