import FerryCore
import HTTPTypes
import NIOCore

/// What a GET or HEAD of a read URL names: `/v1/datasets/{dataset}/manifest`, `/snapshot`, `/versions/{version}`,
/// `/patches/{from}-{to}` or `/objects/{object}`.
enum ReadTarget: Equatable, Sendable {
    case manifest, snapshot
    case version(Int)
    case patch(PatchKey)
    case object(ObjectName)

    /// Whether `?checksum=` applies (the snapshot, version and patch URLs).
    var readsChecksum: Bool {
        switch self {
        case .snapshot, .version, .patch: true
        case .manifest, .object: false
        }
    }

    /// `{version}` of a version URL: 400 unless a canonical version number.
    static func parseVersion(_ text: String) throws -> ReadTarget {
        .version(
            try parsed(
                SnapshotResponder.versionNumber(text), "version", text,
                fix: "use a positive decimal integer without leading zeros"))
    }

    /// `{from}-{to}` of a patch URL: 400 unless two canonical version numbers, `from` below `to`.
    static func parsePatch(_ text: String) throws -> ReadTarget {
        .patch(
            try parsed(
                PatchKey(text), "patch", text,
                fix: "use FROM-TO, two version numbers without leading zeros, FROM below TO"))
    }

    /// `{object}` of an object URL: 400 unless an ``ObjectName``.
    static func parseObject(_ text: String) throws -> ReadTarget {
        .object(
            try parsed(
                ObjectName(text), "object", text, shown: 80,
                fix: "use <sha256>.sqlite, <sha256>.sqlite.gz or <sha256>.patch.gz (64 lowercase hex digits)"))
    }

    /// `value`, parsed from a URL's `text`; nil is a 400 that shows the first `shown` characters of the `what` and
    /// says how to `fix` it.
    private static func parsed<T>(_ value: T?, _ what: String, _ text: String, shown: Int = 40, fix: String) throws
        -> T
    {
        guard let value else {
            throw ServerError(.badRequest, code: .badInput, "\(what) '\(text.prefix(shown))' is malformed: \(fix)")
        }
        return value
    }
}

/// The answer to a GET or HEAD of a manifest, snapshot, version, patch or object URL: its status, every header
/// field but `Date`, and which bytes follow. ``decide(_:in:dataset:method:headers:checksum:)`` is the one place
/// that decides it. The route (``SnapshotResponder``, ``ReadRoutes``) hands it to Hummingbird as it is; the
/// channel's fast path (``ChannelRevalidator``, for ``RawNotModifiedHandler``) writes a 304 or a whole file's 200
/// from it byte for byte, and leaves anything else to the router. No layer adds a field of its own; each adds
/// `Date` (Hummingbird, or the raw handler's ``HTTPDate``) after these fields.
/// `LayerEquivalenceTests` compare the layers' bytes.
struct ReadAnswer: Sendable {
    enum Body: Sendable {
        /// No body: a 304, a HEAD, or an empty file.
        case none
        /// Bytes in memory (the manifest's JSON).
        case bytes(ByteBuffer)
        /// Bytes `start...end` of a stored representation (`end < start`: none).
        case file(VersionEntry.Representation, start: Int64, end: Int64)
    }

    let status: HTTPResponse.Status
    /// Every header field but `Date`, in the order sent; `Content-Length` on every 200 and 206.
    let fields: HTTPFields
    let body: Body

    /// The answer to `method` (GET or HEAD) of `target` in `view`, the caller's own view of `dataset` (the token's
    /// scope on a scoped dataset), with the request's `headers` and its `?checksum=` (nil when absent; ignored where
    /// ``ReadTarget/readsChecksum`` is false).
    ///
    /// Order of evaluation (RFC 9110 §13.2.2): the target's absence → 404; a malformed `?checksum=` → 400;
    /// `If-None-Match` (weak comparison, `*`) or `?checksum=` equal to the current checksum → 304; then `Range` (GET
    /// only) with `If-Range` (strong comparison) → 206 or 416 (thrown, a ``ServerError`` with its fields); otherwise
    /// 200. Errors are thrown as ``ServerError``s, which the fast path never answers.
    static func decide(
        _ target: ReadTarget, in view: SnapshotCatalog.SnapshotView, dataset: String, method: HTTPRequest.Method,
        headers: HTTPFields, checksum: String?
    ) throws -> ReadAnswer {
        switch target {
        case .manifest:
            if let fields = view.manifestNotModified(headers) {
                return ReadAnswer(status: .notModified, fields: fields, body: .none)
            }
            var fields = view.manifestHeaders
            fields[.contentType] = "application/json"
            fields[.contentLength] = String(view.manifestBody.readableBytes)
            return ReadAnswer(status: .ok, fields: fields, body: method == .head ? .none : .bytes(view.manifestBody))
        case .snapshot:
            let entry = try Self.entry(.snapshot, in: view, dataset: dataset)
            return try decide(entry, latest: true, method: method, headers: headers, checksum: checksum)
        case .version, .patch:
            let entry = try Self.entry(target, in: view, dataset: dataset)
            return try decide(entry, latest: false, method: method, headers: headers, checksum: checksum)
        case .object(let object):
            guard let representation = view.object(object) else {
                throw ServerError(
                    .notFound, code: .notFound,
                    "dataset '\(dataset)' has no object \(object) (objects of pruned versions are deleted); fetch the latest manifest"
                )
            }
            if let value = headers[.ifNoneMatch], let condition = ConditionalHeaders.noneMatch(value[...]) {
                let matches: Bool
                switch condition {
                case .any: matches = true
                case .tags(let tags): matches = tags.contains(representation.opaqueTag)
                }
                if matches {
                    return ReadAnswer(status: .notModified, fields: representation.objectNotModified, body: .none)
                }
            }
            return try ranged(
                representation, fields: representation.objectHeaders, method: method, headers: headers,
                what: "object \(object)")
        }
    }

    /// The retained version or the patch `target` names in `view`: 404 when the view does not have it (on a scoped
    /// dataset, another scope's version is 404 exactly like one that never existed).
    static func entry(_ target: ReadTarget, in view: SnapshotCatalog.SnapshotView, dataset: String) throws
        -> VersionEntry
    {
        switch target {
        case .version(let number):
            if let entry = view.version(number) { return entry }
            if view.steps[number] != nil { throw notBuilt(number, dataset: dataset) }
            let retained = view.manifest.versions.map(String.init).joined(separator: ", ")
            throw ServerError(
                .notFound, code: .notFound,
                "version \(number) of dataset '\(dataset)' is not retained (retained: \(retained)); fetch the latest snapshot"
            )
        case .patch(let key):
            guard let entry = view.patch(key) else {
                let available = view.patches.keys.filter { $0.to == view.manifest.version }.map(\.from).sorted().map(
                    String.init
                ).joined(separator: ", ")
                throw ServerError(
                    .notFound, code: .notFound,
                    "dataset '\(dataset)' has no patch from version \(key.from) to \(key.to) (patches to the latest version \(view.manifest.version) start at: \(available.isEmpty ? "none" : available)); fetch the full snapshot"
                )
            }
            return entry
        case .snapshot:
            guard let entry = view.latest else { throw notBuilt(view.manifest.version, dataset: dataset) }
            return entry
        case .manifest, .object:
            preconditionFailure("\(target) names no version entry")
        }
    }

    /// A step version asked for whole that is not built: only the route builds one (``SnapshotCatalog/SnapshotView/prepare(_:)``), so
    /// the channel's fast path leaves such a request to it.
    private static func notBuilt(_ version: Int, dataset: String) -> ServerError {
        ServerError(
            .serviceUnavailable, code: "unavailable",
            "version \(version) of dataset '\(dataset)' is being built whole; retry, or update by patch")
    }

    /// A snapshot, version or patch URL (`latest`: the snapshot URL's `Cache-Control`).
    static func decide(
        _ entry: VersionEntry, latest: Bool, method: HTTPRequest.Method, headers: HTTPFields, checksum: String?
    ) throws -> ReadAnswer {
        // A malformed checksum is an error whatever else the request says.
        var checksumMatches = false
        if let checksum {
            let lowered = checksum.lowercased()
            guard SHA256Hex.isValid(lowered) else {
                throw ServerError(
                    .badRequest, code: .badInput,
                    "checksum '\(checksum.prefix(80))' is malformed: use the 64 hex digits of the SHA-256 of your snapshot"
                )
            }
            checksumMatches = lowered == entry.sha256
        }
        let selected = SnapshotResponder.selectedRepresentation(of: entry, headers: headers, method: method)
        if let fields = SnapshotResponder.notModified(entry, selected: selected, headers: headers, latest: latest) {
            return ReadAnswer(status: .notModified, fields: fields, body: .none)
        }
        if checksumMatches {
            return ReadAnswer(status: .notModified, fields: selected.notModifiedFields(latest: latest), body: .none)
        }
        return try ranged(
            selected, fields: latest ? selected.latestHeaders : selected.versionHeaders, method: method,
            headers: headers, what: selected.etag == entry.identity.etag ? "snapshot" : "gzip copy of the snapshot")
    }

    /// The answer with `selected`'s bytes once no precondition stopped it: `Range` (GET only) with `If-Range`
    /// (strong comparison) → 206 or 416, otherwise 200 (no body for HEAD). `what` names the bytes in a 416's message.
    static func ranged(
        _ selected: VersionEntry.Representation, fields: HTTPFields, method: HTTPRequest.Method, headers: HTTPFields,
        what: String
    ) throws -> ReadAnswer {
        var fields = fields
        let size = selected.size
        if let rangeHeader = method == .get ? headers[.range] : nil {
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
                    fields[.contentLength] = String(max(0, end - start + 1))
                    return ReadAnswer(
                        status: .partialContent, fields: fields, body: .file(selected, start: start, end: end))
                }
            }
        }
        fields[.contentLength] = String(size)
        return ReadAnswer(
            status: .ok, fields: fields, body: method == .head ? .none : .file(selected, start: 0, end: size - 1))
    }
}
