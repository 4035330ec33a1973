import FerryCore
import Foundation
import Logging

/// The partial file a download writes (`.ferry/partial.sqlite`, its record `.ferry/partial.json`): where an
/// interrupted download resumes, a complete one left by a crash, and the end-to-end verification of what arrived.
extension SnapshotDownloader {
    /// The partial download's record, nil when there is none or it does not belong to this dataset (then the
    /// download starts from byte 0).
    func loadRecord() -> PartialRecord? {
        guard let data = FileManager.default.contents(atPath: directory.partialRecord.path) else { return nil }
        let record: PartialRecord
        do {
            record = try JSONDecoder().decode(PartialRecord.self, from: data)
        } catch {
            logger.notice(
                "the partial download's record is malformed; downloading from byte 0", metadata: ["error": "\(error)"])
            return nil
        }
        guard DatasetName.names(record.dataset, lineOf: dataset, schemaVersion: nil),
            SHA256Hex.isValid(record.expected.sha256)
        else { return nil }
        return record
    }

    /// A partial file that already holds every promised byte (a crash hit between download and rename), verified
    /// from disk. Nil when there is none; a bad one is discarded and the error thrown.
    func verifyCompletePartial() async throws -> Outcome? {
        guard let record = loadRecord(), let expectedSize = record.expected.size,
            let size = FileIdentity.size(of: directory.partial), size == expectedSize
        else { return nil }
        logger.info(
            "finishing a complete download left by an interrupted fetch",
            metadata: ["sha256": "\(record.expected.sha256)"])
        let encoding = record.source?.encoding ?? .identity
        let stats = TransferStats(
            bytesReceived: 0, resumedFrom: encoding == .gzip ? (record.source?.size ?? 0) : size, fileBytes: size,
            encoding: encoding)
        return try await BlockingWork.run { [self] in
            let sha256 = try FileDigest.sha256Hex(of: directory.partial)
            return try verify(expected: record.expected, computedSHA256: sha256, stats: stats, line: record.dataset)
        }
    }

    /// Where to resume a download of `promised` (of schema line `line`): the kept prefix of the same version in the
    /// same representation, or nil to start from byte 0 (stale files removed). A record from a client before version
    /// URLs (no `source`) is a prefix of the SQLite file itself and resumes as such.
    func resumePoint(for promised: ExpectedSnapshot, line: String) -> ResumePoint? {
        guard let record = loadRecord(), record.dataset == line, record.expected.sha256 == promised.sha256,
            let version = record.expected.version ?? promised.version, version == promised.version
        else {
            directory.discardPartial()
            return nil
        }
        let source =
            record.source
            ?? TransferSource(
                url: versionURL(version, line: line).absoluteString, encoding: .identity, size: record.expected.size,
                etag: TransferSource.etag(sha256: record.expected.sha256, encoding: .identity))
        let kept = source.encoding == .gzip ? directory.partialGzip : directory.partial
        guard let size = FileIdentity.size(of: kept), size > 0, size < (source.size ?? Int64.max) else {
            directory.discardPartial()
            return nil
        }
        var expected = record.expected
        expected.version = version
        return ResumePoint(from: size, expected: expected, source: source)
    }

    /// Checks the downloaded file end to end: checksum, SQLite header, `PRAGMA quick_check`, the `ferry_snapshot`
    /// row (dataset: `line`, the manifest's; version) and the accepted schema versions. Discards the partial file on
    /// any failure.
    func verify(expected: ExpectedSnapshot, computedSHA256: String, stats: TransferStats, line: String) throws
        -> Outcome
    {
        let info: SnapshotInfo
        do {
            info = try SnapshotVerifier.verify(
                file: directory.partial, expected: expected, computedSHA256: computedSHA256, dataset: dataset,
                line: line)
        } catch {
            directory.discardPartial()
            throw error
        }
        if let refusal = SnapshotVerifier.schemaRefusal(info, accepted: acceptedSchemaVersions, file: directory.partial)
        {
            directory.discardPartial()
            return .refused(info, refusal)
        }
        return .downloaded(Verified(info: info, stats: stats, file: directory.partial))
    }
}
