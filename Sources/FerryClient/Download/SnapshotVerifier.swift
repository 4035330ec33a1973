import FerryCore
import Foundation

/// Checks a downloaded snapshot before it may become `updated.db` or `database.db`.
enum SnapshotVerifier {
    static let sqliteHeader = Array("SQLite format 3\0".utf8)

    /// Verifies `file` against what the server promised; returns what it holds. Its `ferry_snapshot.dataset` must be
    /// `line` (the dataset of the manifest that named it) and `line` must be `dataset` or one of its schema lines, of
    /// the snapshot's schema version.
    static func verify(
        file: URL, expected: ExpectedSnapshot, computedSHA256: String, dataset: String, line: String
    ) throws -> SnapshotInfo {
        guard computedSHA256 == expected.sha256 else {
            throw FerryError(
                .checksumMismatch,
                "the downloaded bytes hash to \(computedSHA256) but the server promised \(expected.sha256); the download was discarded, fetch again (database.db is unchanged)",
                path: file.path)
        }
        if let size = expected.size, let actual = FileIdentity.size(of: file), actual != size {
            throw FerryError(
                .corruptTransfer, "the download is \(actual) bytes, the server announced \(size); fetch again",
                path: file.path)
        }
        let header: Data
        do {
            let handle = try FileHandle(forReadingFrom: file)
            // A read-only handle: closing it cannot lose data.
            defer { try? handle.close() }
            header = try handle.read(upToCount: sqliteHeader.count) ?? Data()
        } catch {
            throw FerryError(
                .io, "cannot read the downloaded snapshot: \(error.localizedDescription)", path: file.path,
                underlying: error)
        }
        guard Array(header) == sqliteHeader else {
            throw FerryError(
                .notSQLite,
                "the server's snapshot is not a SQLite file (checksum matched, so the server publishes a bad file); check the publisher",
                path: file.path)
        }
        let metadata: SnapshotMetadata
        do {
            let db = try SQLiteConnection(path: file.path, mode: .readOnly)
            try db.checkIntegrity(quick: true)
            metadata = try SnapshotMetadata.read(from: db)
        } catch let error as FerryError {
            throw FerryError(
                .notSQLite,
                "the downloaded snapshot is not a valid Ferry snapshot: \(error.message); check the publisher",
                path: file.path)
        }
        guard metadata.dataset == line,
            DatasetName.names(metadata.dataset, lineOf: dataset, schemaVersion: metadata.schemaVersion)
        else {
            throw FerryError(
                .verification,
                "the server sent a snapshot of dataset '\(metadata.dataset)' for '\(line)'; check the server's store",
                path: file.path)
        }
        if let version = expected.version, version != metadata.version {
            throw FerryError(
                .verification,
                "the server announced version \(version) but the snapshot holds version \(metadata.version); check the server's store",
                path: file.path)
        }
        return SnapshotInfo(
            sha256: computedSHA256, version: metadata.version, schemaVersion: metadata.schemaVersion,
            dataset: metadata.dataset)
    }

    /// The error for a snapshot whose schema version the app does not accept, nil when it is accepted.
    static func schemaRefusal(_ info: SnapshotInfo, accepted: Set<Int>?, file: URL) -> FerryError? {
        guard let accepted, let schemaVersion = info.schemaVersion, !accepted.contains(schemaVersion) else {
            return nil
        }
        return FerryError(
            .schemaVersion,
            "version \(info.version ?? 0) has schema version \(schemaVersion), but this app accepts \(accepted.sorted().map(String.init).joined(separator: ", ")); update the app (database.db is unchanged and this version will not be downloaded again)",
            path: file.path)
    }
}
