import CoreMetrics
import FerryCore
import HTTPTypes
import Logging

/// The channel's fast path to the route's answer: for a GET or HEAD of a manifest, snapshot, version or patch URL
/// that the router would answer at once from the request head alone, it asks the route's own decision
/// (``ReadAnswer/decide(_:in:dataset:method:headers:checksum:)``) over the same view and hands the handlers what to
/// write: a 304 (``answer(_:)``) or a whole file's 200 (``download(_:)``), fields as decided. It adds no field and
/// decides no status of its own; nil means "leave it to the router", which then answers it as always.
///
/// It asks only where the router would answer without any wait, from the same view: GET or HEAD without `Prefer`
/// (a manifest long-poll, ``ManifestLongPoll``, goes to the router, and so does any other request with the header:
/// checking its presence is all it costs the fast path), the path in its one canonical form (no query, no `%`, no
/// trailing `/`), no body, no `Expect` or `Upgrade` header and no `Connection` but `keep-alive`, a dataset the
/// catalog serves, and for a scoped dataset a bearer token whose scope the token cache holds fresh (the route would
/// use that same cache entry). The catalog's current state is read per request, so a new publish is seen at once.
///
/// Counts what the server's middleware counts for a 304: `ferry_http_requests_total{route,status="304"}`,
/// `ferry_http_not_modified_total{route}` and the status page's traffic.
///
/// ```swift
/// let revalidator = ChannelRevalidator(access: access, metrics: metrics, traffic: board.traffic, logger: logger)
/// if let answer = revalidator.answer(request) { /* write a 304 with answer.fields */ }
/// ```
struct ChannelRevalidator: Sendable {
    /// The routes a 304 can be answered for, with their patterns as the router names them (for metrics).
    enum Route: Int, CaseIterable, Sendable {
        case manifest, snapshot, version, patch
        /// A public attachment, sent whole from the channel (``AttachmentFiles``); never a 304 here.
        case attachment

        var pattern: String {
            switch self {
            case .manifest: "/v1/datasets/{dataset}/manifest"
            case .snapshot: "/v1/datasets/{dataset}/snapshot"
            case .version: "/v1/datasets/{dataset}/versions/{version}"
            case .patch: "/v1/datasets/{dataset}/patches/{patch}"
            case .attachment: "/v1/datasets/{dataset}/attachments/{sha256}"
            }
        }
    }

    /// The route a target's answer is counted under (nil for an object: the channel leaves objects to the router).
    /// An attachment is no ``ReadTarget``: the channel sends it from ``AttachmentFiles``.
    static func route(_ target: ReadTarget) -> Route? {
        switch target {
        case .manifest: .manifest
        case .snapshot: .snapshot
        case .version: .version
        case .patch: .patch
        case .object: nil
        }
    }

    struct Counters: Sendable {
        let requests: CoreMetrics.Counter
        let notModified: CoreMetrics.Counter
    }

    let access: DatasetAccess
    let metrics: ServerMetrics
    let traffic: TrafficRecorder
    /// 304s of public datasets by their request head's bytes (``RawNotModifiedHandler``).
    let memo = RevalidationMemo()
    let logger: Logger
    /// Per ``Route``, in `rawValue` order.
    let counters: [Counters]
    /// Tests only: called after each answer.
    let onAnswer: (@Sendable (_ remembered: Bool) -> Void)?
    /// Tests only: called after each file sent from the channel, with its bytes (nil when the write failed).
    let onDownload: (@Sendable (_ bytes: Int64?) -> Void)?
    /// The public attachments the route served lately, which the channel sends itself.
    let attachments: AttachmentFiles?

    init(
        access: DatasetAccess, metrics: ServerMetrics, traffic: TrafficRecorder, logger: Logger,
        onAnswer: (@Sendable (_ remembered: Bool) -> Void)? = nil,
        onDownload: (@Sendable (_ bytes: Int64?) -> Void)? = nil, attachments: AttachmentFiles? = nil
    ) {
        self.attachments = attachments
        self.access = access
        self.metrics = metrics
        self.traffic = traffic
        self.logger = logger
        self.onAnswer = onAnswer
        self.onDownload = onDownload
        counters = Route.allCases.map {
            Counters(
                requests: metrics.requestsCounter(route: $0.pattern, status: 304),
                notModified: metrics.notModifiedCounter(route: $0.pattern))
        }
    }

    /// A 304 the revalidator decided on.
    struct Answer {
        let route: Route
        /// The 304's fields, without Date.
        let fields: HTTPFields
        let dataset: String
        /// The view it was decided on, for a public dataset (nil for a scoped one).
        let publicView: SnapshotCatalog.SnapshotView?
        /// Whether ``RevalidationMemo`` may keep it: not when a base name resolved to a schema line.
        var memoizable = true
    }

    /// The 304 for `request` and what it was decided on, or nil to let the router answer: the route's own answer
    /// (``ReadAnswer/decide(_:in:dataset:method:headers:checksum:)``) when it is a 304.
    func answer(_ request: HTTPRequest) -> Answer? {
        let headers = request.headerFields
        // Only a request with If-None-Match can be a 304 here (the path has no `?checksum=`). A request with `Prefer`
        // may be a long-poll (ManifestLongPoll), which must wait, not get a 304 here. A decision that throws (404,
        // 400, 416) is not answered here: the router answers it from the same `ReadAnswer.decide`.
        guard request.method == .get || request.method == .head, headers[.ifNoneMatch] != nil, headers[.prefer] == nil,
            let (dataset, target, route, view, scoped, resolved) = lookUp(request),
            let decided = try? ReadAnswer.decide(  // a decision that throws goes to the router
                target, in: view, dataset: dataset, method: request.method, headers: headers, checksum: nil),
            decided.status == .notModified
        else { return nil }
        var answer = Answer(route: route, fields: decided.fields, dataset: dataset, publicView: scoped ? nil : view)
        answer.memoizable = !resolved
        return answer
    }

    /// The dataset, target and route of `request`'s path, and the view the route would answer it from, when the
    /// router would answer it from its head alone, at once: a path in its canonical form, no body, a connection
    /// that stays open, a dataset the catalog serves and, on a scoped dataset, a token whose scope is cached.
    /// `resolved`: the path named a dataset's base name, answered from one of its schema lines.
    private func lookUp(_ request: HTTPRequest) -> (
        dataset: String, target: ReadTarget, route: Route, view: SnapshotCatalog.SnapshotView, scoped: Bool,
        resolved: Bool
    )? {
        guard let path = request.path, let (requested, target, accepted) = Self.parse(path),
            let route = Self.route(target), Self.isBodilessKeepAlive(request.headerFields),
            // A dataset's base name resolves to one of its schema lines; an error (410, 404) is the router's.
            let dataset = try? access.catalog.resolve(requested, accepted: accepted),
            let (view, scoped) = access.cachedView(request.headerFields, dataset: dataset)
        else { return nil }
        return (dataset, target, route, view, scoped, dataset != requested)
    }

    /// A whole file the raw handler may send itself (with `sendfile`): the route's 200, fields included.
    struct Download {
        let route: Route
        /// The route's fields, `Content-Length` included, without Date.
        let fields: HTTPFields
        /// The selected representation's file and length.
        let file: OpenFile
        let length: Int64
    }

    /// The route's 200 for a plain `GET` of a public dataset's snapshot or version URL (no `If-None-Match`, `Range`
    /// or `If-Range`), when the route's decision is the whole selected representation: its fields, `Content-Length`
    /// included, and its file. Nil for anything else, scoped datasets included: the router answers.
    func download(_ request: HTTPRequest) -> Download? {
        let headers = request.headerFields
        if let attachments, request.method == .get, let path = request.path,
            let (dataset, sha256) = AttachmentFiles.parse(path)
        {
            // As the route answers it: a public dataset (still), no precondition, no range, the whole file.
            guard headers[.ifNoneMatch] == nil, headers[.range] == nil, headers[.ifRange] == nil,
                Self.isBodilessKeepAlive(headers), case .everyone = access.catalog.access(dataset),
                let entry = attachments.entry(dataset: dataset, sha256: sha256)
            else { return nil }
            return Download(route: .attachment, fields: entry.fields, file: entry.file, length: entry.file.size)
        }
        // As in `answer(_:)`: a decision that throws goes to the router, which throws the same error.
        guard request.method == .get, headers[.ifNoneMatch] == nil, headers[.range] == nil, headers[.ifRange] == nil,
            let (dataset, target, route, view, scoped, _) = lookUp(request), !scoped,
            route == .snapshot || route == .version,
            let decided = try? ReadAnswer.decide(  // as above
                target, in: view, dataset: dataset, method: .get, headers: headers, checksum: nil),
            decided.status == .ok, case .file(let selected, start: 0, let end) = decided.body, end == selected.size - 1
        else { return nil }
        access.catalog.devices.noteRead(
            target, status: .ok, latest: view.manifest.version, headers: headers, dataset: dataset)
        return Download(route: route, fields: decided.fields, file: selected.file, length: selected.size)
    }

    /// Counts a download the raw handler answered as the server's middleware counts the route's: the request with
    /// status 200 and, once the file has been sent, its bytes (the route counts the SQLite file as it is written).
    func recordDownload(_ route: Route, line: @autoclosure () -> String, bytes: Int64?) {
        metrics.recordRequest(route: route.pattern, status: 200)
        traffic.recordRequest(status: 200)
        if let bytes, bytes > 0 {
            metrics.bytesCounter(route: route.pattern).increment(by: Int(bytes))
            traffic.recordBytes(Int(bytes))
        }
        if logger.logLevel <= .debug {
            logger.debug(
                "\(line()) 200", metadata: ["route": .string(route.pattern), "bytes": .stringConvertible(bytes ?? 0)])
        }
        onDownload?(bytes)
    }

    /// No request body, no `Expect` or `Upgrade`, and no `Connection` but `keep-alive`: a request the route answers
    /// from its head alone, on a connection that stays open.
    static func isBodilessKeepAlive(_ headers: HTTPFields) -> Bool {
        (headers[.contentLength].map { $0 == "0" } ?? true) && headers[.transferEncoding] == nil
            && (headers[.connection].map(Self.isKeepAlive) ?? true) && headers[.expect] == nil
            && headers[.upgrade] == nil
    }

    /// `Connection: keep-alive` (browsers send it) changes nothing on the route either; any other value (`close`
    /// above all) goes to the router.
    static func isKeepAlive(_ value: String) -> Bool {
        value.utf8.count == 10 && value.lowercased() == "keep-alive"
    }

    /// Counts a 304 for `route`; `line` (`GET /v1/…`) is logged at debug level. `remembered`: the answer came from
    /// the ``RevalidationMemo``.
    func record(_ route: Route, line: @autoclosure () -> String, remembered: Bool = false) {
        let counters = self.counters[route.rawValue]
        counters.requests.increment()
        counters.notModified.increment()
        traffic.recordRequest(status: 304)
        if logger.logLevel <= .debug {
            logger.debug("\(line()) 304", metadata: ["route": .string(route.pattern), "bytes": "0"])
        }
        onAnswer?(remembered)
    }

    /// `/v1/datasets/{dataset}/manifest|snapshot|versions/{n}|patches/{from}-{to}`, each part in its only valid
    /// form (a dataset name, canonical version numbers); anything else, a query included, is nil.
    static func parse(_ path: String) -> (dataset: String, target: ReadTarget, accepted: Set<Int>?)? {
        // The one query answered here: a manifest's `?schema=` (docs/schema-lines.md), in its valid form only.
        guard let query = path.utf8.firstIndex(of: UInt8(ascii: "?")) else {
            return parsePath(path).map { ($0.dataset, $0.target, nil) }
        }
        let schema = "?schema="
        guard path.utf8[query...].starts(with: schema.utf8),
            let (dataset, target) = parsePath(String(path[..<query])), case .manifest = target,
            // A malformed list is not answered here: the router answers it 400, naming the parameter.
            let accepted = try? SchemaLines.accepted(path[path.utf8.index(query, offsetBy: schema.utf8.count)...])
        else { return nil }
        return (dataset, target, accepted)
    }

    /// The path without a query, as ``parse(_:)`` describes.
    static func parsePath(_ path: String) -> (dataset: String, target: ReadTarget)? {
        let prefix = "/v1/datasets/"
        guard path.utf8.starts(with: prefix.utf8) else { return nil }
        let parts = path.utf8.dropFirst(prefix.utf8.count).split(
            separator: UInt8(ascii: "/"), maxSplits: 3, omittingEmptySubsequences: false)
        guard parts.count == 2 || parts.count == 3, let name = String(parts[0]), DatasetName.isValid(name) else {
            return nil
        }
        let kind = parts[1]
        if parts.count == 2 {
            if kind.elementsEqual("manifest".utf8) { return (name, .manifest) }
            if kind.elementsEqual("snapshot".utf8) { return (name, .snapshot) }
            return nil
        }
        guard let argument = String(parts[2]) else { return nil }
        if kind.elementsEqual("versions".utf8) {
            return SnapshotResponder.versionNumber(argument).map { (name, .version($0)) }
        }
        if kind.elementsEqual("patches".utf8) {
            return PatchKey(argument).map { (name, .patch($0)) }
        }
        return nil
    }
}
