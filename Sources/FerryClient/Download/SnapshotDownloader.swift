import Crypto
import FerryCore
import Foundation
import Logging

/// Progress of one download: bytes of the file on disk so far (a resumed prefix included) out of the total.
///
/// ```swift
/// _ = try await client.checkForUpdates { p in print(p.bytesReceived, p.totalBytes ?? -1) }
/// ```
public struct FetchProgress: Sendable, Equatable {
    /// Bytes of the snapshot on disk so far, including a prefix kept from an interrupted download.
    public var bytesReceived: Int64
    /// Size of the snapshot, when the server said.
    public var totalBytes: Int64?
    /// Where this transfer started: 0, or the size of the partial file it resumed.
    public var resumedFrom: Int64

    public init(bytesReceived: Int64, totalBytes: Int64?, resumedFrom: Int64) {
        self.bytesReceived = bytesReceived
        self.totalBytes = totalBytes
        self.resumedFrom = resumedFrom
    }
}

/// Streams a snapshot into `.ferry/partial.sqlite`, hashing while writing, resuming with `Range` + `If-Range`, and
/// verifying the result. Works only inside `.ferry`: it never touches `database.db` or `updated.db`.
/// Its methods are nonisolated, so the network and the hashing run off the client actor.
struct SnapshotDownloader: Sendable {
    let directory: ClientDirectory
    let transport: any SnapshotTransport
    let snapshotURL: URL
    let dataset: String
    let acceptedSchemaVersions: Set<Int>?
    let writeBufferSize: Int
    let maxBytesPerSecond: Int64?
    /// The access token, asked before each request; nil sends no `Authorization` header.
    var tokenProvider: FerryClient.TokenProvider? = nil
    let logger: Logger

    /// A verified snapshot sitting in `.ferry/partial.sqlite`, ready to be renamed into place.
    struct Verified: Sendable, Equatable {
        var info: SnapshotInfo
        var bytesReceived: Int64
        var resumedFrom: Int64
    }

    enum Outcome: Sendable {
        case notModified
        case downloaded(Verified)
        /// Verified, but of a schema version the app does not accept: the partial was discarded.
        case refused(SnapshotInfo, FerryError)
    }

    /// What a response handler produced.
    private enum Step: Sendable {
        case notModified
        case restart(String)
        case written(ExpectedSnapshot, sha256: String, bytesReceived: Int64, resumedFrom: Int64)
    }

    // MARK: Partial file

    /// The partial download's record, nil when there is none or it does not belong to this dataset (then the
    /// download starts from byte 0).
    func loadRecord() -> PartialRecord? {
        guard let data = FileManager.default.contents(atPath: directory.partialRecord.path) else { return nil }
        let record: PartialRecord
        do {
            record = try JSONDecoder().decode(PartialRecord.self, from: data)
        } catch {
            logger.notice("the partial download's record is malformed; downloading from byte 0", metadata: ["error": "\(error)"])
            return nil
        }
        guard record.dataset == dataset, SHA256Hex.isValid(record.expected.sha256) else { return nil }
        return record
    }

    /// A partial file that already holds every promised byte (a crash hit between download and rename), verified
    /// from disk. Nil when there is none; a bad one is discarded and the error thrown.
    func verifyCompletePartial() async throws -> Outcome? {
        guard let record = loadRecord(), let expectedSize = record.expected.size,
            let size = FileIdentity.size(of: directory.partial), size == expectedSize
        else { return nil }
        logger.info("finishing a complete download left by an interrupted fetch", metadata: ["sha256": "\(record.expected.sha256)"])
        return try await BlockingWork.run { [self] in
            let sha256 = try FileDigest.sha256Hex(of: directory.partial)
            return try verify(expected: record.expected, computedSHA256: sha256, bytesReceived: 0, resumedFrom: size)
        }
    }

    /// Where to resume: the partial file's size and its record, or nil to start from byte 0 (stale files removed).
    func resumePoint() -> (record: PartialRecord, from: Int64)? {
        guard let record = loadRecord(), let size = FileIdentity.size(of: directory.partial), size > 0 else {
            directory.discardPartial()
            return nil
        }
        if let expected = record.expected.size, size >= expected {
            directory.discardPartial()
            return nil
        }
        return (record, size)
    }

    // MARK: Download

    /// One conditional GET. `knownChecksums` go in `If-None-Match` (pending, else live, plus refused ones).
    /// At most one automatic restart from byte 0 when the server answers a range request inconsistently.
    func download(knownChecksums: [String], progress: (@Sendable (FetchProgress) -> Void)?) async throws -> Outcome {
        var allowResume = true
        for _ in 0..<2 {
            let resume = allowResume ? resumePoint() : nil
            if !allowResume { directory.discardPartial() }
            var headers = ["Accept-Encoding": "identity"]
            if let authorization = try await BearerAuthorization.header(from: tokenProvider) { headers["Authorization"] = authorization }
            if !knownChecksums.isEmpty { headers["If-None-Match"] = knownChecksums.map { "\"\($0)\"" }.joined(separator: ", ") }
            if let resume {
                headers["Range"] = "bytes=\(resume.from)-"
                headers["If-Range"] = "\"\(resume.record.expected.sha256)\""
                logger.info("resuming download", metadata: ["from": "\(resume.from)", "sha256": "\(resume.record.expected.sha256)"])
            }
            let request = SnapshotRequest(url: snapshotURL, headers: headers)
            let step: Step = try await transport.get(request) { head, body in
                let plan = try ResponsePlan.decide(
                    head: head, resumeFrom: resume?.from, partial: resume?.record.expected, url: snapshotURL.absoluteString)
                switch plan {
                case .notModified:
                    return .notModified
                case .restartFromZero(let reason):
                    return .restart(reason)
                case .full(let expected):
                    try await BlockingWork.run { [self] in
                        directory.discardPartial()
                        try writeRecord(expected)
                    }
                    return try await stream(body, into: expected, from: 0, hasher: SHA256(), progress: progress)
                case .resume(let from, let expected):
                    let recorded = resume?.record.expected
                    let hasher = try await BlockingWork.run { [self] in
                        if expected != recorded { try writeRecord(expected) }
                        return try hashPrefix(of: directory.partial, count: from)
                    }
                    return try await stream(body, into: expected, from: from, hasher: hasher, progress: progress)
                }
            }
            switch step {
            case .notModified:
                return .notModified
            case .restart(let reason):
                logger.warning("discarding the partial download and starting from byte 0", metadata: ["reason": "\(reason)"])
                allowResume = false
                continue
            case .written(let expected, let sha256, let received, let resumedFrom):
                return try await BlockingWork.run { [self] in
                    try verify(expected: expected, computedSHA256: sha256, bytesReceived: received, resumedFrom: resumedFrom)
                }
            }
        }
        directory.discardPartial()
        throw FerryError(
            .corruptTransfer, "the server answered range requests inconsistently twice (\(snapshotURL.absoluteString)); fetch again, or check a proxy in between")
    }

    /// Writes `.ferry/partial.json` durably: what the partial download is promised to become.
    private func writeRecord(_ expected: ExpectedSnapshot) throws {
        try DurableFile.write(try JSONEncoder().encode(PartialRecord(dataset: dataset, expected: expected)), to: directory.partialRecord)
    }

    /// Writes the body at `from`, hashing as it goes; checks the byte count; fsyncs. The writes run on the thread
    /// pool, a buffer at a time.
    private func stream(
        _ body: SnapshotResponseBody, into expected: ExpectedSnapshot, from: Int64, hasher: SHA256,
        progress: (@Sendable (FetchProgress) -> Void)?
    ) async throws -> Step {
        var hasher = hasher
        let (partial, writeBufferSize) = (directory.partial, self.writeBufferSize)
        let writer = try await BlockingWork.run { try PartialFileWriter(url: partial, offset: from, bufferSize: writeBufferSize) }
        var onDisk = from
        let started = ContinuousClock.now
        progress?(FetchProgress(bytesReceived: onDisk, totalBytes: expected.size, resumedFrom: from))
        do {
            for try await chunk in body {
                if let size = expected.size, onDisk + Int64(chunk.count) > size {
                    directory.discardPartial()
                    throw FerryError(
                        .corruptTransfer, "the server sent more than the \(size) bytes it announced; the partial download was discarded, fetch again")
                }
                hasher.update(data: chunk)
                if writer.buffer(chunk) { try await BlockingWork.run { try writer.flush() } }
                onDisk += Int64(chunk.count)
                progress?(FetchProgress(bytesReceived: onDisk, totalBytes: expected.size, resumedFrom: from))
                if let limit = maxBytesPerSecond, limit > 0 {
                    let due = Duration.nanoseconds(Int64(Double(onDisk - from) / Double(limit) * 1e9))
                    let elapsed = ContinuousClock.now - started
                    if due > elapsed { try await Task.sleep(for: due - elapsed) }
                }
            }
        } catch let error as FerryError {
            await keepReceivedBytes(writer)
            throw error
        } catch {
            // Keep what arrived: the next fetch resumes from it.
            await keepReceivedBytes(writer)
            throw FerryError(
                .offline,
                "the download from \(snapshotURL.absoluteString) broke off after \(onDisk) of \(expected.size.map(String.init) ?? "?") bytes (\(error)); the next fetch resumes from there, database.db is unchanged")
        }
        if let size = expected.size, onDisk != size {
            await keepReceivedBytes(writer)
            throw FerryError(
                .corruptTransfer,
                "the download ended after \(onDisk) of \(size) bytes; the next fetch resumes from there, database.db is unchanged")
        }
        try await BlockingWork.run { try writer.finish() }
        return .written(expected, sha256: hasher.finalize().hex, bytesReceived: onDisk - from, resumedFrom: from)
    }

    /// Writes out what is buffered before a download ends early, so the next fetch resumes after it. Failing only
    /// means resuming earlier (the partial file's size says where), so it is logged, and the download's own error is
    /// the one thrown.
    private func keepReceivedBytes(_ writer: PartialFileWriter) async {
        do {
            try await BlockingWork.run { try writer.flush() }
        } catch {
            logger.notice("could not keep the last bytes received; the next fetch resumes before them", metadata: ["error": "\(error)"])
        }
    }

    /// Hashes the first `count` bytes already on disk, so a resumed download is verified end to end.
    private func hashPrefix(of url: URL, count: Int64) throws -> SHA256 {
        var hasher = SHA256()
        guard let handle = FileHandle(forReadingAtPath: url.path) else {
            throw FerryError(.io, "cannot open the partial download to resume it", path: url.path)
        }
        // A read-only handle: closing it cannot lose data.
        defer { try? handle.close() }
        var remaining = count
        while remaining > 0 {
            let chunk = try handle.read(upToCount: Int(min(remaining, 1 << 20))) ?? Data()
            guard !chunk.isEmpty else {
                throw FerryError(.io, "the partial download is shorter than expected; fetch again", path: url.path)
            }
            hasher.update(data: chunk)
            remaining -= Int64(chunk.count)
        }
        return hasher
    }

    // MARK: Verification

    /// Checks the downloaded file end to end: checksum, SQLite header, `PRAGMA quick_check`, the `ferry_snapshot`
    /// row (dataset, version) and the accepted schema versions. Discards the partial file on any failure.
    func verify(expected: ExpectedSnapshot, computedSHA256: String, bytesReceived: Int64, resumedFrom: Int64) throws -> Outcome {
        let info: SnapshotInfo
        do {
            info = try SnapshotVerifier.verify(
                file: directory.partial, expected: expected, computedSHA256: computedSHA256, dataset: dataset)
        } catch {
            directory.discardPartial()
            throw error
        }
        if let refusal = SnapshotVerifier.schemaRefusal(info, accepted: acceptedSchemaVersions, file: directory.partial) {
            directory.discardPartial()
            return .refused(info, refusal)
        }
        return .downloaded(Verified(info: info, bytesReceived: bytesReceived, resumedFrom: resumedFrom))
    }
}
