import FerryCore
import HTTPTypes
import Hummingbird
import NIOCore
import NIOPosix

/// `GET|HEAD /v1/datasets/{dataset}/snapshot` and `/versions/{version}`: conditional requests, byte ranges and
/// gzip negotiation per RFC 9110, answered from the catalog's memory and streamed from its open files.
///
/// Written by hand rather than with Hummingbird's FileMiddleware, which was measured here revalidating at about a
/// quarter of nginx's rate, answers `bytes=-n` and out-of-range starts wrongly, and opens the path per request
/// (so a version pruned mid-download would fail).
///
/// Order of evaluation (RFC 9110 §13.2.2): a malformed `?checksum=` → 400; `If-None-Match` (weak comparison,
/// `*`) or `?checksum=` equal to the current checksum → 304; then `Range` (GET only) with `If-Range` (strong
/// comparison) → 206/416; otherwise 200.
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
    /// The chunks all downloads together may hold in memory (``ServerConfiguration/downloadBufferBytes``).
    let budget: BufferBudget

    func latest(_ request: Request, context: some RequestContext) async throws -> Response {
        let name = try Self.datasetName(context)
        let (view, _) = try await access.view(request, dataset: name)
        return try respond(to: request, entry: view.latest, cacheControlLatest: true)
    }

    /// A version URL answers only from the caller's own view: on a scoped dataset, a version number of another scope
    /// is 404 exactly like a number that never existed.
    func version(_ request: Request, context: some RequestContext) async throws -> Response {
        try respond(to: request, entry: try await versionEntry(request, context: context), cacheControlLatest: false)
    }

    /// The retained version `{version}` of `{dataset}` in the caller's own view (the version URL and its object
    /// lookup): 400 when the number is malformed, 404 when the view does not retain it.
    func versionEntry(_ request: Request, context: some RequestContext) async throws -> VersionEntry {
        let name = try Self.datasetName(context)
        let text = context.parameters.get("version") ?? ""
        guard let number = Self.versionNumber(text) else {
            throw ServerError(
                .badRequest, code: .badInput,
                "version '\(text.prefix(40))' is malformed: use a positive decimal integer without leading zeros")
        }
        let (view, _) = try await access.view(request, dataset: name)
        guard let entry = view.versions[number] else {
            let retained = view.versions.keys.sorted().map(String.init).joined(separator: ", ")
            throw ServerError(
                .notFound, code: .notFound,
                "version \(number) of dataset '\(name)' is not retained (retained: \(retained)); fetch the latest snapshot"
            )
        }
        return entry
    }

    func respond(to request: Request, entry: VersionEntry, cacheControlLatest: Bool) throws -> Response {
        let headers = request.headers
        // A malformed checksum is an error whatever else the request says.
        var checksumMatches = false
        if let checksum = request.uri.queryParameters["checksum"] {
            let lowered = checksum.lowercased()
            guard SHA256Hex.isValid(lowered) else {
                throw ServerError(
                    .badRequest, code: .badInput,
                    "checksum '\(checksum.prefix(80))' is malformed: use the 64 hex digits of the SHA-256 of your snapshot"
                )
            }
            checksumMatches = lowered == entry.sha256
        }

        let selected = Self.selectedRepresentation(of: entry, headers: headers, method: request.method)
        if let fields = Self.notModified(entry, selected: selected, headers: headers, latest: cacheControlLatest) {
            return Response(status: .notModified, headers: fields)
        }
        if checksumMatches {
            return Response(status: .notModified, headers: selected.notModifiedFields(latest: cacheControlLatest))
        }

        return try answer(
            request, selected, fields: cacheControlLatest ? selected.latestHeaders : selected.versionHeaders,
            what: selected.etag == entry.identity.etag ? "snapshot" : "gzip copy of the snapshot")
    }

    /// The representation of `entry` a request gets, chosen from `Accept-Encoding` alone: the stored gzip copy when
    /// gzip is acceptable and the version has one, else the SQLite file. A range of the gzip copy goes only to a
    /// client that resumes that copy: it names its ETag in If-Range. Another client asking for a range gets the
    /// SQLite file's bytes: HTTP libraries decode Content-Encoding and cannot decode a slice from the middle of a
    /// gzip stream (found by the fuzzer; curl --compressed too). The object lookup uses the same choice.
    static func select(_ request: Request, entry: VersionEntry) -> VersionEntry.Representation {
        selectedRepresentation(of: entry, headers: request.headers, method: request.method)
    }

    /// The answer with `selected`'s bytes once no precondition stopped it: `Range` (GET only) with `If-Range`
    /// (strong comparison) → 206 or 416, otherwise 200 (no body for HEAD). `what` names the bytes in a 416's message.
    func answer(_ request: Request, _ selected: VersionEntry.Representation, fields: HTTPFields, what: String) throws
        -> Response
    {
        let headers = request.headers
        var fields = fields
        let size = selected.size
        if let rangeHeader = request.method == .get ? headers[.range] : nil {
            let ifRangeOK =
                headers[.ifRange].map { ConditionalHeaders.ifRangeMatches($0[...], tag: selected.opaqueTag) } ?? true
            if ifRangeOK {
                switch ByteRangeRequest.resolve(rangeHeader[...], size: size) {
                case .ignore:
                    break
                case .unsatisfiable:
                    var errorFields = HTTPFields()
                    errorFields[.contentRange] = "bytes */\(size)"
                    errorFields[.acceptRanges] = "bytes"
                    errorFields[.eTag] = selected.etag
                    if fields[.vary] != nil { errorFields[.vary] = fields[.vary] }
                    throw ServerError(
                        .rangeNotSatisfiable, code: "range-not-satisfiable",
                        "range '\(rangeHeader.prefix(80))' is outside the \(size)-byte \(what)",
                        headers: errorFields)
                case .single(let start, let end):
                    fields[.contentRange] = "bytes \(start)-\(end)/\(size)"
                    return body(selected, status: .partialContent, fields: fields, start: start, end: end, head: false)
                }
            }
        }
        return body(
            selected, status: .ok, fields: fields, start: 0, end: size - 1, head: request.method == .head)
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
    /// one). Nil when the header is absent, malformed or names another version. Shared by the route and
    /// ``NotModifiedHandler``, so both answer with the same fields.
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

    private func body(
        _ representation: VersionEntry.Representation, status: HTTPResponse.Status, fields: HTTPFields,
        start: Int64, end: Int64, head: Bool
    ) -> Response {
        let length = max(0, end - start + 1)
        var fields = fields
        fields[.contentLength] = String(length)
        if head || length == 0 {
            return Response(status: status, headers: fields)
        }
        let file = representation.file
        let chunkSize = self.chunkSize
        let threadPool = self.threadPool
        let budget = self.budget
        let body = ResponseBody(contentLength: Int(length)) { writer in
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
        return Response(status: status, headers: fields, body: body)
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
