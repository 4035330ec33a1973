import HTTPTypes
import Logging
import NIOCore

/// Answers conditional requests before the HTTP decoder, as nginx does: it reads the request head from the bytes
/// received, asks ``ChannelRevalidator`` for the route's own answer (``ReadAnswer``) and writes the 304's bytes
/// itself. What costs a revalidation after that is the two system calls: no HTTP decoding, no
/// conversion to swift-http-types and back, no pass through eight channel handlers, which together were measured
/// at most of a 304's CPU time.
///
/// With `sendsFiles` (plain HTTP), a plain `GET` of a public dataset's whole snapshot or version file is answered
/// here too (``ChannelRevalidator/download(_:)``): the route's head, then the file with `sendfile(2)`, one file at a
/// time per connection.
///
/// It reads only a strict subset of HTTP/1.1 (``RawRequestHead``): `GET` or `HEAD`, a path of `[a-z0-9_/-]`,
/// `HTTP/1.1`, header lines `name: value` of printable ASCII, each name at most once, the whole head within one read
/// and the request limits. Anything else, and anything the revalidator does not answer, goes to the HTTP decoder
/// unchanged, and from then on every byte of the connection does (the decoder owns the stream once it has seen part
/// of it, and the router answers that connection's revalidations). Requests
/// pipelined in one read are answered in order until the first that is not.
///
/// Sits between TLS and the HTTP codec (``RevalidatingHTTP1Channel``). It tells ``ConnectionTimeoutHandler`` of
/// each answer, so the header and idle timeouts stay right, and counts answers like the router
/// (``ChannelRevalidator/record(_:request:)``).
final class RawNotModifiedHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    let revalidator: ChannelRevalidator
    let maxHeadBytes: Int
    /// Told of each answered request; nil when the server has neither timeout.
    var timeouts: ConnectionTimeoutHandler?
    /// Whether a plain `GET` of a whole snapshot or version file is answered here with `sendfile` (never behind TLS,
    /// which must encrypt the bytes in this process).
    let sendsFiles: Bool
    /// Set once the HTTP decoder has received bytes: from then on everything goes to it.
    private var decoderOwnsStream = false
    /// Whether a file is being sent (``send(_:_:line:)``).
    private var sendingFile = false
    /// A quiesce event waiting for the file being sent.
    private var heldQuiesce = false
    /// The next check that the file being sent still has its length (``watch(_:_:length:)``).
    private var fileCheck: Scheduled<Void>?
    private var needsFlush = false
    private var date = HTTPDate()
    /// The memo's answer this connection gave last (``recall(_:)``).
    private var recent: Recent?

    /// A remembered answer and its head's bytes (the memo's key), with its whole 304 as written in `second`.
    struct Recent {
        let head: ByteBuffer
        let entry: RevalidationMemo.Entry
        var response = ByteBuffer()
        var second = Int.min
    }

    init(revalidator: ChannelRevalidator, maxHeadBytes: Int, sendsFiles: Bool) {
        self.revalidator = revalidator
        self.maxHeadBytes = maxHeadBytes
        self.sendsFiles = sendsFiles
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !decoderOwnsStream else {
            context.fireChannelRead(data)
            return
        }
        var buffer = unwrapInboundIn(data)
        while buffer.readableBytes > 0 {
            // A head answered before, byte for byte, on a view still current: the same answer, without parsing.
            if let entry = recall(&buffer) {
                answerRecent(context)
                revalidator.record(entry.route, line: entry.line, remembered: true)
                revalidator.access.catalog.devices.record(id: entry.device, dataset: entry.dataset)
                continue
            }
            let parsed = buffer.withUnsafeReadableBytes { RawRequestHead.parse($0, maxHeadBytes: maxHeadBytes) }
            guard let head = parsed, let decided = revalidator.answer(head.request) else {
                // One whole file at a time per connection: a request pipelined behind it goes to the decoder (its
                // answer is written after the file, in order), so a client cannot queue files without bound.
                if sendsFiles, !sendingFile, let head = parsed, let download = revalidator.download(head.request) {
                    buffer.moveReaderIndex(forwardBy: head.length)
                    send(context, download, line: "GET \(head.request.path ?? "")")
                    continue
                }
                decoderOwnsStream = true
                context.fireChannelRead(wrapInboundOut(buffer))
                return
            }
            let prefix = Self.headPrefix(context, status: "HTTP/1.1 304 Not Modified\r\n", fields: decided.fields)
            let line = "\(head.request.method.rawValue) \(head.request.path ?? "")"
            if let view = decided.publicView, decided.memoizable {
                let entry = RevalidationMemo.Entry(
                    dataset: decided.dataset, view: view, route: decided.route, prefix: prefix, line: line,
                    device: head.request.headerFields[.ferryDevice])
                let key = revalidator.memo.remember(
                    buffer.getSlice(at: buffer.readerIndex, length: head.length)!, entry)
                recent = Recent(head: key, entry: entry)
            }
            buffer.moveReaderIndex(forwardBy: head.length)
            answer(context, prefix: prefix)
            revalidator.record(decided.route, line: line)
        }
    }

    /// The memo's answer to the head at the start of `buffer`, moving past that head: first the answer this
    /// connection gave last (a client revalidating one URL again and again sends the same bytes each time), found
    /// by comparing bytes, without hashing the head or taking the memo's lock; then the memo's. The answer found
    /// is ``recent`` from then on.
    private func recall(_ buffer: inout ByteBuffer) -> RevalidationMemo.Entry? {
        let catalog = revalidator.access.catalog
        if let recent, buffer.getSlice(at: buffer.readerIndex, length: recent.head.readableBytes) == recent.head,
            RevalidationMemo.isCurrent(recent.entry, catalog: catalog)
        {
            // `recent.head` ends with the head's empty line, so these bytes are one whole head, that one.
            buffer.moveReaderIndex(forwardBy: recent.head.readableBytes)
            return recent.entry
        }
        guard let length = buffer.withUnsafeReadableBytes({ RevalidationMemo.headLength($0, limit: maxHeadBytes) }),
            let head = buffer.getSlice(at: buffer.readerIndex, length: length),
            let entry = revalidator.memo.answer(head, catalog: catalog)
        else { return nil }
        buffer.moveReaderIndex(forwardBy: length)
        recent = Recent(head: ByteBuffer(bytes: head.readableBytesView), entry: entry)
        return entry
    }

    /// Writes the route's 200 for a whole file: the head, then the file as a `FileRegion`, which the socket sends
    /// with `sendfile(2)` from the page cache, no copy through this process. The region borrows the descriptor of
    /// the catalog's ``OpenFile`` (kept alive, and the descriptor taken back unclosed, once the write is done), so
    /// a version pruned meanwhile still finishes, as on the route.
    private func send(_ context: ChannelHandlerContext, _ download: ChannelRevalidator.Download, line: String) {
        var head = Self.headPrefix(context, status: "HTTP/1.1 200 OK\r\n", fields: download.fields)
        head.writeString(date.now())
        head.writeStaticString("\r\n\r\n")
        sendingFile = true
        timeouts?.rawResponseStarted()
        let done = context.eventLoop.makePromise(of: Void.self)
        let file = download.file
        var handle: NIOFileHandle?
        if download.length > 0 {
            context.write(NIOAny(head), promise: nil)
            // Must stay: `FileRegion`, NIO's one way to have the socket `sendfile(2)` a file, takes only a
            // `NIOFileHandle`, and this initializer is NIO's only way to wrap a descriptor already open (NIOFileSystem,
            // which NIO suggests instead, has no `FileRegion`). `_deprecated` names the type's future, not a warning.
            // The handle borrows the descriptor and gives it back unclosed below (`takeDescriptorOwnership`).
            let borrowed = NIOFileHandle(_deprecatedTakingOwnershipOfDescriptor: file.descriptor)
            handle = borrowed
            context.write(
                NIOAny(FileRegion(fileHandle: borrowed, readerIndex: 0, endIndex: Int(download.length))), promise: done)
        } else {
            context.write(NIOAny(head), promise: done)
        }
        needsFlush = true
        watch(context, file, length: download.length)
        let revalidator = self.revalidator
        done.futureResult.assumeIsolated().whenComplete { result in
            self.fileCheck?.cancel()
            self.fileCheck = nil
            // The write is over (sent, or failed with the connection): the descriptor goes back to `file`.
            // only marks the handle closed; cannot fail once the write is done
            _ = try? handle?.takeDescriptorOwnership()
            withExtendedLifetime(file) {}
            let sent: Int64? = if case .success = result { download.length } else { nil }
            revalidator.recordDownload(download.route, line: line, bytes: sent)
            self.sendingFile = false
            self.timeouts?.rawResponseEnded()
            if self.heldQuiesce {
                self.heldQuiesce = false
                context.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
            }
        }
    }

    /// Checks once a second that the file being sent still has `length` bytes. A store file is never changed in
    /// place, but one truncated anyway would leave `sendfile` finding its end early, retried for as long as the
    /// client keeps the connection open; the route's reads fail instead. A short file closes the connection, as
    /// the route's failed read does.
    private func watch(_ context: ChannelHandlerContext, _ file: OpenFile, length: Int64) {
        fileCheck = context.eventLoop.assumeIsolated().scheduleTask(in: .seconds(1)) {
            guard self.sendingFile else { return }
            if (file.currentSize() ?? 0) < length {
                self.revalidator.logger.error(
                    "a file being sent is shorter than when it was opened; closing the connection",
                    metadata: ["path": .string(file.path), "bytes": .stringConvertible(length)])
                context.close(promise: nil)
            } else {
                self.watch(context, file, length: length)
            }
        }
    }

    /// A graceful shutdown waits for a file being sent: the quiesce event, which makes Hummingbird close a
    /// connection with no request in flight, is passed on once the file is out.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent, sendingFile {
            heldQuiesce = true
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// A response head up to its date: the status line, each field as `name: value`, then `Date: `.
    private static func headPrefix(_ context: ChannelHandlerContext, status: StaticString, fields: HTTPFields)
        -> ByteBuffer
    {
        var prefix = context.channel.allocator.buffer(capacity: 384)
        prefix.writeStaticString(status)
        for field in fields {
            prefix.writeString(field.name.rawName)
            prefix.writeStaticString(": ")
            prefix.writeString(field.value)
            prefix.writeStaticString("\r\n")
        }
        prefix.writeStaticString("Date: ")
        return prefix
    }

    /// Writes a 304: `prefix` (status line and fields through `Date: `), the date, the empty line.
    private func answer(_ context: ChannelHandlerContext, prefix: ByteBuffer) {
        write(context, Self.response(context, prefix: prefix, date: date.now()))
    }

    /// Writes the 304 of ``recent``: the same bytes as long as the date's second is the same (built once a second,
    /// then only referenced).
    private func answerRecent(_ context: ChannelHandlerContext) {
        guard var current = recent else { return }
        let text = date.now()
        if current.second != date.second {
            current.response = Self.response(context, prefix: current.entry.prefix, date: text)
            current.second = date.second
            recent = current
        }
        write(context, current.response)
    }

    private static func response(_ context: ChannelHandlerContext, prefix: ByteBuffer, date: String) -> ByteBuffer {
        var response = context.channel.allocator.buffer(capacity: prefix.readableBytes + 40)
        response.writeImmutableBuffer(prefix)
        response.writeString(date)
        response.writeStaticString("\r\n\r\n")
        return response
    }

    private func write(_ context: ChannelHandlerContext, _ response: ByteBuffer) {
        context.write(NIOAny(response), promise: nil)
        needsFlush = true
        timeouts?.headAnswered()
    }

    /// Flushes the answers of this read in one write. The event goes on only once the decoder owns the stream:
    /// before, no handler after this one has received anything to complete (the pipeline's handlers after the codec
    /// act on a read's completion only to deliver what they were given).
    func channelReadComplete(context: ChannelHandlerContext) {
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        if decoderOwnsStream { context.fireChannelReadComplete() }
    }
}

/// A request head in the strict subset of HTTP/1.1 that ``RawNotModifiedHandler`` reads (RFC 9112 §3, §5):
///
/// ```
/// ("GET" / "HEAD") SP 1*( %x61-7A / DIGIT / "_" / "-" / "/" ) SP "HTTP/1.1" CRLF
/// *( token ":" *( SP / HTAB ) *( %x20-7E / HTAB ) CRLF )
/// CRLF
/// ```
///
/// Each field name at most once (ignoring case), at most 64 fields, the whole head within `maxHeadBytes`. Anything
/// else, an incomplete head included, is nil: the HTTP decoder reads it instead.
struct RawRequestHead {
    let request: HTTPRequest
    /// Bytes of the head, its final empty line included.
    let length: Int

    static let maxFields = 64

    static func parse(_ bytes: UnsafeRawBufferPointer, maxHeadBytes: Int) -> RawRequestHead? {
        let end = min(bytes.count, maxHeadBytes)
        var i = 0
        func expect(_ text: StaticString) -> Bool {
            let count = text.utf8CodeUnitCount
            guard i + count <= end else { return false }
            let expected = UnsafeRawBufferPointer(start: text.utf8Start, count: count)
            for k in 0..<count where bytes[i + k] != expected[k] { return false }
            i += count
            return true
        }
        let method: HTTPRequest.Method
        if expect("GET ") {
            method = .get
        } else if expect("HEAD ") {
            method = .head
        } else {
            return nil
        }
        let pathStart = i
        while i < end, isPathByte(bytes[i]) { i += 1 }
        guard i > pathStart, bytes[pathStart] == UInt8(ascii: "/") else { return nil }
        // The one query the fast path answers: the accepted schema versions of a dataset in lines.
        if i < end, bytes[i] == UInt8(ascii: "?") {
            guard expect("?schema=") else { return nil }
            let valueStart = i
            while i < end,
                (bytes[i] >= UInt8(ascii: "0") && bytes[i] <= UInt8(ascii: "9")) || bytes[i] == UInt8(ascii: ",")
            {
                i += 1
            }
            guard i > valueStart else { return nil }
        }
        let path = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[pathStart..<i]), as: UTF8.self)
        guard expect(" HTTP/1.1\r\n") else { return nil }

        var fields = HTTPFields()
        var names: [String] = []
        var authority: String?
        while true {
            if expect("\r\n") { break }
            let nameStart = i
            while i < end, isTokenByte(bytes[i]) { i += 1 }
            guard i > nameStart, i < end, bytes[i] == UInt8(ascii: ":") else { return nil }
            let rawName = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[nameStart..<i]), as: UTF8.self)
            i += 1
            while i < end, bytes[i] == UInt8(ascii: " ") || bytes[i] == UInt8(ascii: "\t") { i += 1 }
            let valueStart = i
            while i < end, bytes[i] == UInt8(ascii: "\t") || (bytes[i] >= 0x20 && bytes[i] <= 0x7E) { i += 1 }
            var valueEnd = i
            while valueEnd > valueStart,
                bytes[valueEnd - 1] == UInt8(ascii: " ") || bytes[valueEnd - 1] == UInt8(ascii: "\t")
            { valueEnd -= 1 }
            guard expect("\r\n") else { return nil }
            let lowered = rawName.lowercased()
            guard !names.contains(lowered), names.count < maxFields, let name = HTTPField.Name(rawName) else {
                return nil
            }
            names.append(lowered)
            let value = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[valueStart..<valueEnd]), as: UTF8.self)
            if lowered == "host" {
                authority = value
            } else {
                fields.append(HTTPField(name: name, value: value))
            }
        }
        let request = HTTPRequest(method: method, scheme: nil, authority: authority, path: path, headerFields: fields)
        return RawRequestHead(request: request, length: i)
    }

    /// What a path the fast path may answer is made of: dataset names (a schema line's `.vN` too) and numbers; the
    /// one query is `?schema=` with digits and commas. `ChannelRevalidator.parse` then accepts each part only in its
    /// one valid form.
    static func isPathByte(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
            || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
            || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "/")
            || byte == UInt8(ascii: ".")
    }

    /// RFC 9110 §5.6.2 tchar.
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
            UInt8(ascii: "'"), UInt8(ascii: "*"),
            UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
            UInt8(ascii: "`"), UInt8(ascii: "|"),
            UInt8(ascii: "~"):
            true
        default: false
        }
    }
}
