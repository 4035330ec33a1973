import Crypto
import FerryCore
import Foundation
import Logging

/// Progress of one download, in bytes of the representation on the wire (the compressed bytes when the server sends
/// its gzip copy), a resumed prefix included.
///
/// ```swift
/// _ = try await client.checkForUpdates { p in print(p.bytesReceived, p.totalBytes ?? -1) }
/// ```
public struct FetchProgress: Sendable, Equatable {
    /// Bytes of the transfer so far, including a prefix kept from an interrupted download.
    public var bytesReceived: Int64
    /// Size of the transfer (the gzip copy's size when compressed), when the server said.
    public var totalBytes: Int64?
    /// Where this transfer started: 0, or the size of the prefix it resumed after.
    public var resumedFrom: Int64
    /// Whether this transfer is a row-level patch (false: the full version).
    public var isPatch: Bool

    public init(bytesReceived: Int64, totalBytes: Int64?, resumedFrom: Int64, isPatch: Bool = false) {
        self.bytesReceived = bytesReceived
        self.totalBytes = totalBytes
        self.resumedFrom = resumedFrom
        self.isPatch = isPatch
    }
}

/// What one transfer moved: bytes on the wire and bytes of the SQLite file.
struct TransferStats: Sendable, Equatable {
    /// Bytes received over the network by this call (compressed when gzip; a resumed prefix is not counted).
    var bytesReceived: Int64 = 0
    /// The byte of the representation this call resumed after (0 when it started fresh).
    var resumedFrom: Int64 = 0
    /// Size of the SQLite file.
    var fileBytes: Int64?
    /// How the bytes travelled.
    var encoding: TransferEncoding?
    /// Size of the version's file as published, when it differs from `fileBytes` (a patched copy).
    var publishedBytes: Int64?
}

/// Checks the server and streams a new snapshot into `.ferry/partial.sqlite`. First it revalidates the small manifest
/// (`GET …/manifest` with `If-None-Match`: 304 means nothing new and moves no snapshot byte); then it downloads the
/// version the manifest names from its immutable URL (`GET …/versions/{n}`, cacheable by any shared cache), asking
/// for the gzip copy (`Accept-Encoding: gzip`), inflating and hashing while writing, resuming an interrupted download
/// with `Range` + `If-Range` on the same version and representation, and verifying the result. Works only inside
/// `.ferry`: it never touches `database.db` or `updated.db`. Its methods are nonisolated, so the network and the
/// hashing run off the client actor.
struct SnapshotDownloader: Sendable {
    let directory: ClientDirectory
    let transport: any HTTPTransport
    /// `SERVER/v1/datasets`: the configured dataset's manifest and each line's versions and patches are under it.
    let datasetsURL: URL
    /// The configured dataset, a base name; the manifest names it or one of its schema lines (`trips.v2`), whose
    /// name is then the path of that manifest's versions and patches.
    let dataset: String
    let acceptedSchemaVersions: Set<Int>?
    let writeBufferSize: Int
    let maxBytesPerSecond: Int64?
    /// The longest a check waits in all for servers that answer `Retry-After`; a longer wait is reported instead.
    var retryAfterLimit: Duration = .seconds(10)
    /// Whether a device with nothing to patch from starts from the manifest's checkpoint and its patch
    /// (``downloadFromCheckpoint(_:patch:manifest:progress:)``) rather than downloading the current version whole.
    var startsFromCheckpoints = true
    /// The access token, asked before each request; nil sends no `Authorization` header.
    var tokenProvider: FerryClient.TokenProvider? = nil
    /// The client directory's device id, sent as `Ferry-Device` with every request; nil sends none.
    var deviceID: String? = nil
    let logger: Logger
    /// Why the last patch offered could not be used (the check then took the full download).
    let patchFailure = Locked<String?>(nil)
    /// The stream of a partitioned dataset this downloader reads (`["shared"]`, `["partitions", KEY]`): its manifest,
    /// versions and patches are under `…/DATASET/shared/…` or `…/DATASET/partitions/KEY/…`; empty for a dataset.
    var streamPath: [String] = []
    /// The long-poll's wait sent with the manifest request (`Prefer: wait=N`); nil sends none.
    var waitForChanges: Duration? = nil
    /// What the last manifest response said about waiting: `Preference-Applied: wait=N` and `Retry-After`.
    let manifestPacing = Locked(ManifestPacing())

    /// A verified snapshot sitting in `.ferry/partial.sqlite`, ready to be renamed into place.
    struct Verified: Sendable, Equatable {
        var info: SnapshotInfo
        var stats: TransferStats
        /// Where the verified file is: `.ferry/partial.sqlite` for a download, `.ferry/patched.sqlite` for a patch.
        var file: URL
        /// How it was made.
        var path: UpdatePath = .full
        /// The version's content digest as the manifest named it (nil when unknown), kept for the next patch.
        var contentDigest: String? = nil
        /// For a patch: the device's own rows it settled (``PatchApplier/Outcome/ownRowsSettled``).
        var ownRowsSettled: Int? = nil
    }

    enum Outcome: Sendable {
        case notModified
        case downloaded(Verified)
        /// A verified patch from the device's version to the manifest's, to apply to a copy of the base.
        case patch(DownloadedPatch)
        /// Verified, but of a schema version the app does not accept: the partial was discarded.
        case refused(SnapshotInfo, FerryError)
    }

    /// What a response handler produced.
    private enum Step: Sendable {
        case restart(String)
        /// 404 on a version URL the manifest just named: it was pruned meanwhile.
        case versionGone
        /// Written and hashed; `sink` still has to make it durable.
        case written(ExpectedSnapshot, sha256: String, stats: TransferStats, sink: DownloadSink)
    }

    /// Where an interrupted download continues: the byte of the representation, and what it was promised to be.
    struct ResumePoint: Sendable, Equatable {
        var from: Int64
        var expected: ExpectedSnapshot
        var source: TransferSource
    }

    /// `…/DATASET/manifest?schema=…`: every check asks for the configured dataset, never a line.
    var manifestURL: URL {
        guard !streamPath.isEmpty else {
            return FerryClient.Configuration.manifestURL(
                datasets: datasetsURL, dataset: dataset, accepted: acceptedSchemaVersions)
        }
        return lineURL(dataset).appendingPathComponent("manifest")
    }

    /// `…/LINE`, or `…/LINE/shared` and `…/LINE/partitions/KEY` for a stream (``streamPath``, each segment
    /// percent-encoded): where a line's versions and patches are.
    func lineURL(_ line: String) -> URL {
        PartitionStream.url(datasetsURL.appendingPathComponent(line), appending: streamPath)
    }

    /// `…/LINE/versions/N`, `line` being the dataset the manifest that named the version answered with.
    func versionURL(_ version: Int, line: String) -> URL {
        lineURL(line).appendingPathComponent("versions").appendingPathComponent(String(version))
    }

    /// `headers` with the ones every request carries: `Authorization` (when there is a token) and `Ferry-Device`.
    func requestHeaders(_ headers: [String: String]) async throws -> [String: String] {
        try await headers.merging(BearerAuthorization.commonHeaders(device: deviceID, provider: tokenProvider)) { $1 }
    }

    // MARK: Check and download

    /// One check: revalidates the manifest with `If-None-Match: knownChecksums` (pending, else live, plus refused
    /// ones); when it names something new, downloads that version. A version pruned between the two requests (404)
    /// makes one more round.
    /// With a `patchBase`, a manifest that names a patch from it (see ``choosePatch(_:base:accepted:)``) makes it
    /// download that patch instead (``Outcome/patch(_:)``); a patch that cannot be downloaded or verified falls back
    /// to the full download, and its error is kept in ``patchFailure``.
    func check(knownChecksums: [String], patchBase: PatchBase? = nil, progress: (@Sendable (FetchProgress) -> Void)?)
        async throws -> Outcome
    {
        try await honouringRetryAfter {
            try await checkOnce(knownChecksums: knownChecksums, patchBase: patchBase, progress: progress)
        }
    }

    /// Runs `body` again after each `Retry-After` wait the server asks for (``ServerAsksToWait``) while the waits stay
    /// within ``retryAfterLimit`` in all; past it, the server's answer is thrown, saying how long it asked to wait.
    func honouringRetryAfter<T>(_ body: () async throws -> T) async throws -> T {
        var waited = 0
        while true {
            do {
                return try await body()
            } catch let wait as ServerAsksToWait {
                guard Duration.seconds(waited + wait.seconds) <= retryAfterLimit else {
                    throw wait.failure.waiting(wait.seconds)
                }
                logger.notice("the server asks to retry later; waiting", metadata: ["seconds": "\(wait.seconds)"])
                try await Task.sleep(for: .seconds(wait.seconds))
                waited += wait.seconds
            }
        }
    }

    private func checkOnce(
        knownChecksums: [String], patchBase: PatchBase?, progress: (@Sendable (FetchProgress) -> Void)?
    ) async throws -> Outcome {
        for _ in 0..<2 {
            guard let manifest = try await revalidateManifest(knownChecksums: knownChecksums) else {
                return .notModified
            }
            // A cache in between that dropped If-None-Match still cannot make us download what we have.
            if knownChecksums.contains(manifest.sha256) { return .notModified }
            if let patchBase,
                let ref = Self.choosePatch(
                    manifest, base: patchBase, dataset: dataset, accepted: acceptedSchemaVersions)
                    ?? Self.chooseCatchUp(
                        manifest, base: patchBase, dataset: dataset, accepted: acceptedSchemaVersions)
            {
                do {
                    let (changeset, bytes, checked) = try await downloadPatch(
                        ref, line: manifest.dataset, progress: progress)
                    return .patch(
                        DownloadedPatch(
                            ref: checked, changeset: changeset, target: manifest.current, base: patchBase,
                            bytesReceived: bytes, rule: ref.sha256.isEmpty ? .catchUp : .strict))
                } catch let error as FerryError
                    where ![.offline, .unauthorized, .schemaRetired].contains(error.code)
                {
                    logger.warning(
                        "the patch cannot be used; taking the full download",
                        metadata: ["from": "\(ref.from)", "to": "\(ref.to)", "error": "\(error.message)"])
                    patchFailure.withLock { $0 = error.message }
                }
            }
            // After a patch failed in this check, the whole file: never the same patch bytes again.
            if startsFromCheckpoints, patchFailure.withLock({ $0 }) == nil,
                let (checkpoint, ref) = Self.chooseCheckpoint(manifest, accepted: acceptedSchemaVersions)
            {
                do {
                    if let outcome = try await downloadFromCheckpoint(
                        checkpoint, patch: ref, manifest: manifest, progress: progress)
                    {
                        return outcome
                    }
                } catch let error as FerryError
                    where ![.offline, .unauthorized, .schemaRetired].contains(error.code)
                {
                    logger.warning(
                        "the checkpoint and its patch cannot be used; taking the full download",
                        metadata: ["checkpoint": "\(checkpoint.version)", "error": "\(error.message)"])
                    patchFailure.withLock { $0 = error.message }
                }
            }
            let promised = ExpectedSnapshot(sha256: manifest.sha256, size: manifest.size, version: manifest.version)
            if let outcome = try await download(promised, line: manifest.dataset, progress: progress) {
                guard case .downloaded(var verified) = outcome else { return outcome }
                verified.contentDigest = manifest.contentDigest
                return .downloaded(verified)
            }
            logger.notice("version \(manifest.version) was pruned right after the manifest named it; checking again")
        }
        throw FerryError(
            .network,
            "the server keeps naming versions it no longer serves (\(manifestURL.absoluteString)); try again later or check the server's log"
        )
    }

    /// Downloads `promised` from its version URL under `line` (the manifest's dataset); nil when the server no
    /// longer has it (404). At most one automatic restart from byte 0 when the server answers a range request
    /// inconsistently. A 410 (the line is retired) is ``FerryError/Code/schemaRetired``, the partial kept.
    func download(_ promised: ExpectedSnapshot, line: String, progress: (@Sendable (FetchProgress) -> Void)?)
        async throws -> Outcome?
    {
        guard let version = promised.version else { preconditionFailure("a manifest always names its version") }
        let url = versionURL(version, line: line)
        var allowResume = true
        for _ in 0..<2 {
            let resume = try await BlockingWork.run { [self, allowResume] in
                guard allowResume else {
                    directory.discardPartial()
                    return nil as ResumePoint?
                }
                return resumePoint(for: promised, line: line)
            }
            // Resume in the representation the kept prefix is of; otherwise ask for the gzip copy (a server without
            // one sends the SQLite file, which is just as good).
            var headers = try await requestHeaders([
                "Accept-Encoding": resume?.source.encoding == .identity ? "identity" : "gzip"
            ])
            if let resume {
                headers["Range"] = "bytes=\(resume.from)-"
                headers["If-Range"] = resume.source.etag
                logger.info(
                    "resuming download",
                    metadata: [
                        "from": "\(resume.from)", "sha256": "\(resume.expected.sha256)",
                        "encoding": "\(resume.source.encoding.rawValue)",
                    ])
            }
            let step: Step = try await transport.send(TransportRequest(url: url, headers: headers)) { head, body in
                if head.status == 404 { return .versionGone }
                if head.status == 410 { throw await SchemaRetired.error(dataset: dataset, url: url, body: body) }
                let plan = try ResponsePlan.decide(
                    head: head, resumeFrom: resume?.from, partial: resume?.expected, source: resume?.source,
                    promised: promised,
                    url: url.absoluteString)
                switch plan {
                case .notModified:
                    throw FerryError(
                        .network,
                        "the server answered 304 Not Modified to \(url.absoluteString) without a condition; check a cache in between"
                    )
                case .restartFromZero(let reason):
                    return .restart(reason)
                case .full(let expected, let source):
                    return try await receive(
                        body, expected, source, resumingAt: nil, line: line, url: url, progress: progress)
                case .resume(let from, let expected, let source):
                    return try await receive(
                        body, expected, source, resumingAt: from, line: line, url: url, progress: progress)
                }
            }
            switch step {
            case .versionGone:
                return nil
            case .restart(let reason):
                logger.warning(
                    "discarding the partial download and starting from byte 0", metadata: ["reason": "\(reason)"])
                allowResume = false
                continue
            case .written(let expected, let sha256, let stats, let sink):
                // The fsync and the verification (which only reads the file) overlap; the file is renamed only
                // after both. When the verification throws, the fsync is awaited all the same, its result unused.
                async let durable: Void = sink.makeDurable()
                let outcome = try await BlockingWork.run { [self] in
                    try verify(expected: expected, computedSHA256: sha256, stats: stats, line: line)
                }
                try await durable
                return outcome
            }
        }
        await discardPartial()
        throw FerryError(
            .corruptTransfer,
            "the server answered range requests inconsistently twice (\(url.absoluteString)); fetch again, or check a proxy in between"
        )
    }

    /// Streams a 200 (`from` nil: the partial starts over) or a 206 (resuming at `from`) into the partial file;
    /// `.restart` when the kept prefix turns out unusable.
    private func receive(
        _ body: TransportResponseBody, _ expected: ExpectedSnapshot, _ source: TransferSource, resumingAt from: Int64?,
        line: String, url: URL, progress: (@Sendable (FetchProgress) -> Void)?
    ) async throws -> Step {
        let sink: DownloadSink
        do {
            sink = try await BlockingWork.run { [self] in
                if from == nil {
                    directory.discardPartial()
                    try writeRecord(expected, source, line: line)
                } else if loadRecord() != PartialRecord(dataset: line, expected: expected, source: source) {
                    // The record learns what the 206 confirmed (sizes; the source of a record from an older client).
                    try writeRecord(expected, source, line: line)
                }
                return try DownloadSink(
                    directory: directory, encoding: source.encoding, from: from ?? 0, fileLimit: expected.size,
                    bufferSize: writeBufferSize)
            }
        } catch let unusable as DownloadSink.UnusablePrefix {
            return .restart(unusable.reason)
        }
        return try await stream(body, into: sink, expected: expected, source: source, url: url, progress: progress)
    }

    /// Removes the partial download's files, off the cooperative pool.
    private func discardPartial() async {
        // Removing scratch: whatever is left is discarded or checked by the next fetch's resume.
        try? await BlockingWork.run { [directory] in directory.discardPartial() }  // failing leaves scratch only
    }

    /// Writes `.ferry/partial.json` durably: what the partial download is promised to become (a version of `line`),
    /// and where from.
    private func writeRecord(_ expected: ExpectedSnapshot, _ source: TransferSource, line: String) throws {
        try DurableFile.write(
            try JSONEncoder().encode(PartialRecord(dataset: line, expected: expected, source: source)),
            to: directory.partialRecord)
    }

    /// Streams the body into `sink` (see ``DownloadSink``: written as it comes, or kept compressed and inflated, on
    /// the sink's own threads), checks the byte counts; the caller makes the file durable.
    private func stream(
        _ body: TransportResponseBody, into sink: DownloadSink, expected: ExpectedSnapshot, source: TransferSource,
        url: URL,
        progress: (@Sendable (FetchProgress) -> Void)?
    ) async throws -> Step {
        let from = sink.resumedFrom
        let started = ContinuousClock.now
        progress?(FetchProgress(bytesReceived: from, totalBytes: source.size, resumedFrom: from))
        sink.start()
        do {
            for try await chunk in body {
                if let size = source.size, sink.wireBytes + Int64(chunk.count) > size {
                    let hint =
                        source.encoding == .gzip
                        ? " (an HTTP client or proxy that inflates gzip itself also causes this: pass the body on as it came)"
                        : ""
                    throw FerryError(
                        .corruptTransfer,
                        "the server sent more than the \(size) bytes it announced\(hint); the partial download was discarded, fetch again"
                    )
                }
                try await sink.take(chunk)
                progress?(FetchProgress(bytesReceived: sink.wireBytes, totalBytes: source.size, resumedFrom: from))
                if let limit = maxBytesPerSecond, limit > 0 {
                    let due = Duration.nanoseconds(Int64(Double(sink.wireBytes - from) / Double(limit) * 1e9))
                    let elapsed = ContinuousClock.now - started
                    if due > elapsed { try await Task.sleep(for: due - elapsed) }
                }
            }
        } catch let error as FerryError where error.code == .corruptTransfer {
            // Too many bytes, or a corrupt gzip stream: nothing of this download can be trusted.
            _ = await sink.stop()
            await discardPartial()
            throw error
        } catch let error as FerryError {
            await keepReceivedBytes(sink)
            throw error
        } catch {
            // Keep what arrived: the next fetch resumes from it.
            await keepReceivedBytes(sink)
            throw FerryError(
                .offline,
                "the download from \(url.absoluteString) broke off after \(sink.wireBytes) of \(source.size.map(String.init) ?? "?") bytes (\(error)); the next fetch resumes from there, database.db is unchanged"
            )
        }
        if let size = source.size, sink.wireBytes != size {
            await keepReceivedBytes(sink)
            throw FerryError(
                .corruptTransfer,
                "the download ended after \(sink.wireBytes) of \(size) bytes; the next fetch resumes from there, database.db is unchanged"
            )
        }
        let sha256: String
        do {
            sha256 = try await sink.finish()
        } catch let error as FerryError where error.code == .corruptTransfer {
            await discardPartial()
            throw error
        }
        let stats = TransferStats(
            bytesReceived: sink.wireBytes - from, resumedFrom: from, fileBytes: sink.fileBytes, encoding: sink.encoding)
        return .written(expected, sha256: sha256, stats: stats, sink: sink)
    }

    /// Lets the sink write out what arrived before a download ends early, so the next fetch resumes after it. Failing
    /// only means resuming earlier (the partial file's size says where), so it is logged, and the download's own error
    /// is the one thrown (a stage's error, when it is the one thrown, is logged once more here).
    private func keepReceivedBytes(_ sink: DownloadSink) async {
        if let error = await sink.stop() {
            logger.notice(
                "could not keep the last bytes received; the next fetch resumes before them",
                metadata: ["error": "\(error)"])
        }
    }
}
