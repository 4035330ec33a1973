import FerryCore
import HTTPTypes
import Hummingbird
import NIOCore
import NIOPosix

/// `GET|HEAD /v1/datasets/{dataset}/manifest`, `/snapshot`, `/versions/{version}`, `/patches/{patch}` and
/// `/objects/{object}`: conditional requests, byte ranges and gzip negotiation per RFC 9110, answered from the
/// catalog's memory and streamed from its open files. What each request gets (status, fields, bytes) is decided by
/// ``ReadAnswer/decide(_:in:dataset:method:headers:checksum:)``, the one decision the channel's fast path
/// (``ChannelRevalidator``) uses too; this type checks the URL's parameters and the token, and streams the bytes.
///
/// Written by hand rather than with Hummingbird's FileMiddleware, which was measured here revalidating at about a
/// quarter of nginx's rate, answers `bytes=-n` and out-of-range starts wrongly, and opens the path per request
/// (so a version pruned mid-download would fail).
///
/// The representation is chosen first, from `Accept-Encoding` alone (the stored gzip copy when gzip is acceptable
/// and the version has one), and every later step applies to it (RFC 9110 §14.2: a range applies to the selected
/// representation): `Range` counts bytes of the gzip copy, `If-Range` compares strongly with its ETag
/// (`"<sha256>-gzip"`), `Content-Range` and 416's `bytes */size` give its length. So a client resumes a compressed
/// download exactly where it stopped, and a client that asks for identity (or sends no `Accept-Encoding`) gets the
/// SQLite file's bytes as before. `Vary: Accept-Encoding` is on every answer that depends on it, 206 and 416 included.
struct SnapshotResponder: Sendable {
    let access: DatasetAccess
    let chunkSize: Int
    let threadPool: NIOThreadPool
    /// ``ServerDependencies/objectURL``: the object lookup's `Ferry-Object-URL`.
    let objectURL: (@Sendable (_ dataset: String, _ object: String) -> String)?
    /// The chunks all downloads together may hold in memory (``ServerConfiguration/downloadBufferBytes``).
    let budget: BufferBudget

    func latest(_ request: Request, context: some RequestContext) async throws -> Response {
        try await respond(to: request, context: context) { .snapshot }
    }

    /// A version URL answers only from the caller's own view: on a scoped dataset, a version number of another scope
    /// is 404 exactly like a number that never existed.
    func version(_ request: Request, context: some RequestContext) async throws -> Response {
        try await respond(to: request, context: context) { try Self.versionTarget(context) }
    }

    /// The `{version}` of a version URL: 400 when the number is malformed.
    static func versionTarget(_ context: some RequestContext) throws -> ReadTarget {
        try ReadTarget.parseVersion(context.parameters.get("version") ?? "")
    }

    /// The retained version (or, with `patch`, the patch) that a version or patch URL names, in the caller's own
    /// view (the object lookup of that URL): 400 when the URL's parameter is malformed, 404 when the view does not
    /// retain it.
    func entry(_ request: Request, context: some RequestContext, patch: Bool) async throws -> VersionEntry {
        let name = try Self.datasetName(context)
        let target = try patch ? Self.patchTarget(context) : Self.versionTarget(context)
        let (view, _, dataset) = try await access.view(request, dataset: name)
        try await view.prepare(target)
        return try ReadAnswer.entry(target, in: view, dataset: dataset)
    }

    /// Answers a GET or HEAD of the URL `parse` reads in the caller's own view, as
    /// ``ReadAnswer/decide(_:in:dataset:method:headers:checksum:)`` decides. The dataset name, then the URL's
    /// parameter (`parse`) are checked first: a malformed one is 400 before the token is asked.
    func respond(to request: Request, context: some RequestContext, _ parse: () throws -> ReadTarget)
        async throws -> Response
    {
        let name = try Self.datasetName(context)
        let target = try parse()
        let (view, _, dataset) = try await access.view(request, dataset: name)
        try await view.prepare(target)
        let checksum = target.readsChecksum ? request.uri.queryParameters["checksum"].map { String($0) } : nil
        let answer = try ReadAnswer.decide(
            target, in: view, dataset: dataset, method: request.method, headers: request.headers, checksum: checksum)
        access.catalog.devices.noteRead(
            target, status: answer.status, latest: view.manifest.version, headers: request.headers, dataset: dataset)
        return response(answer)
    }

    /// The representation of `entry` a request gets (``selectedRepresentation(of:headers:method:)``), for the
    /// object lookup.
    static func select(_ request: Request, entry: VersionEntry) -> VersionEntry.Representation {
        selectedRepresentation(of: entry, headers: request.headers, method: request.method)
    }

    /// `answer` as Hummingbird sends it: its status and fields as they are, and its body (a file's bytes streamed
    /// in chunks under the buffer budget).
    func response(_ answer: ReadAnswer) -> Response {
        switch answer.body {
        case .none:
            return Response(status: answer.status, headers: answer.fields)
        case .bytes(let bytes):
            return Response(status: answer.status, headers: answer.fields, body: .init(byteBuffer: bytes))
        case .file(let representation, let start, let end):
            guard end >= start else { return Response(status: answer.status, headers: answer.fields) }
            return Response(
                status: answer.status, headers: answer.fields, body: body(representation, start: start, end: end))
        }
    }

    /// The representation a request gets, chosen from `Accept-Encoding` alone: the stored gzip copy when gzip is
    /// acceptable and the version has one. A range of the gzip copy goes only to a client that resumes that copy
    /// (it names its ETag in If-Range); another client asking for a range gets the SQLite file's bytes: HTTP
    /// libraries decode Content-Encoding and cannot decode a slice from the middle of a gzip stream (found by the
    /// fuzzer; curl --compressed too).
    static func selectedRepresentation(
        of entry: VersionEntry, headers: HTTPFields, method: HTTPRequest.Method
    ) -> VersionEntry.Representation {
        let rangeHeader = method == .get ? headers[.range] : nil
        if let gzip = entry.gzip, let accept = headers[.acceptEncoding], ConditionalHeaders.acceptsGzip(accept[...]),
            rangeHeader == nil
                || headers[.ifRange].map({ ConditionalHeaders.ifRangeMatches($0[...], tag: gzip.opaqueTag) }) == true
        {
            return gzip
        }
        return entry.identity
    }

    /// The 304 fields when `If-None-Match` matches: weak comparison against either representation of this version
    /// (both carry the same content), and the 304 echoes the representation the client holds (`*`: the selected
    /// one). Nil when the header is absent, malformed or names another version.
    static func notModified(
        _ entry: VersionEntry, selected: VersionEntry.Representation, headers: HTTPFields, latest: Bool
    ) -> HTTPFields? {
        guard let value = headers[.ifNoneMatch], let condition = ConditionalHeaders.noneMatch(value[...]) else {
            return nil
        }
        switch condition {
        case .any:
            return selected.notModifiedFields(latest: latest)
        case .tags(let tags):
            for tag in tags {
                if let held = entry.representation(matchingOpaqueTag: tag) {
                    return held.notModifiedFields(latest: latest)
                }
            }
            return nil
        }
    }

    /// Bytes `start...end` of `representation`, read on the thread pool in chunks.
    private func body(_ representation: VersionEntry.Representation, start: Int64, end: Int64) -> ResponseBody {
        let length = end - start + 1
        let file = representation.file
        let chunkSize = self.chunkSize
        let threadPool = self.threadPool
        let budget = self.budget
        return ResponseBody(contentLength: Int(length)) { writer in
            // Each chunk in memory holds a slot of the server's buffer budget until it has left the process, so
            // memory stays bounded however many downloads run. A written chunk still sits in the channel until the
            // socket takes it; the writer's next `write` returns only once the channel is writable again, that is
            // once that chunk has drained, so a chunk's slot is returned after the next write. Meanwhile the next
            // chunk is read on the thread pool with a second slot when one is free, so the file and the socket
            // both stay busy; when none is free, the download waits for its own chunk to drain (an empty write)
            // and reuses that slot, so a download never waits on another for its second slot.
            let allocator = ByteBufferAllocator()
            @Sendable func read(_ offset: Int64) async throws -> ByteBuffer {
                let count = Int(min(Int64(chunkSize), end + 1 - offset))
                return try await threadPool.runIfActive {
                    try file.read(offset: offset, count: count, allocator: allocator)
                }
            }
            var offset = start
            await budget.acquire()
            var held = 1  // slots this download holds; all are returned on every way out
            defer { for _ in 0..<held { budget.release() } }
            var buffer = try await read(offset)
            var drainingSlot = false  // whether one held slot is for a written chunk the channel may still hold
            while true {
                let next = offset + Int64(buffer.readableBytes)
                try await writer.write(buffer)
                if drainingSlot {  // the chunk before this one has drained
                    budget.release()
                    held -= 1
                }
                drainingSlot = true
                if next > end { break }
                if budget.tryAcquire() {
                    held += 1
                } else {
                    try await writer.write(ByteBuffer())  // returns once this chunk has drained; its slot is reused
                    drainingSlot = false
                }
                buffer = try await read(next)
                offset = next
            }
            try await writer.write(ByteBuffer())  // the last chunk drains before its slot is returned
            try await writer.finish(nil)
        }
    }

    static func datasetName(_ context: some RequestContext) throws -> String {
        let name = context.parameters.get("dataset") ?? ""
        guard DatasetName.isValid(name) else {
            throw ServerError(
                .badRequest, code: .badInput,
                "dataset name '\(name.prefix(80))' is invalid: use 1-64 characters from a-z, 0-9, '_' and '-'")
        }
        return name
    }

    static func unknownDataset(_ name: String) -> ServerError {
        ServerError(.notFound, code: .notFound, "dataset '\(name)' has no published snapshot on this server")
    }

    /// `[1-9][0-9]{0,17}`: canonical positive integers only, so each version has exactly one URL.
    static func versionNumber(_ text: String) -> Int? {
        let utf8 = text.utf8
        guard let first = utf8.first, first >= 49, first <= 57, utf8.count <= 18,
            utf8.allSatisfy({ $0 >= 48 && $0 <= 57 })
        else { return nil }
        return Int(text)
    }
}
