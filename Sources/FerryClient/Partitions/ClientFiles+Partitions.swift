import FerryCore
import Foundation
import Logging

/// What a composition produced: the verified file to install, what it was made of, and the rows it kept for
/// partitions being left.
struct Composition: Sendable {
    var verified: SnapshotDownloader.Verified
    /// ``Subscriptions/composed`` once it is installed.
    var inputs: [String: String]
    /// Rows kept per leaving key (see ``PartitionComposer/Outcome/held``).
    var held: [String: Int]
}

extension ClientFiles {
    /// Composes `database.db`'s next version into `.ferry/composing.sqlite.tmp` (see ``PartitionComposer``) when the
    /// streams' files or the subscriptions changed since the last composition, or partitions are being left (their
    /// held rows follow the outbox); nil when nothing changed. Throws when the shared stream was never downloaded.
    func compose(_ subscriptions: Subscriptions, _ state: inout ClientStateFile) throws -> Composition? {
        let shared = directory.directory(of: .shared).database
        guard let sharedIdentity = try Self.identity(shared) else {
            throw FerryError(
                .noDatabase,
                "the shared tables of dataset '\(subscriptions.dataset)' have not been downloaded yet: fetch again once online",
                path: shared.path)
        }
        var inputs = [PartitionStream.shared.directoryName: sharedIdentity]
        var partitions: [URL] = []
        for key in subscriptions.keys {
            let stream = PartitionStream.partition(key)
            let file = directory.directory(of: stream).database
            guard let identity = try Self.identity(file) else { continue }
            inputs[stream.directoryName] = identity
            partitions.append(file)
        }
        var leaving: [String: URL] = [:]
        for key in subscriptions.leaving {
            let file = directory.directory(of: .partition(key)).database
            if directory.exists(file) { leaving[key] = file }
        }
        // FerryGRDB's pool holds an empty database.db before the initial sync: that is no composition.
        let composedBefore =
            try directory.info(of: directory.database, state: &state) != nil || directory.exists(directory.updated)
        if subscriptions.composed == inputs, subscriptions.leaving.isEmpty, composedBefore { return nil }
        let composer = PartitionComposer(
            shared: shared, partitions: partitions, leaving: leaving, live: directory.database,
            keys: subscriptions.keys, layout: subscriptions.layout)
        let target = directory.composing
        let outcome = try composer.compose(into: target)
        let metadata = try SnapshotMetadata.read(from: SQLiteConnection(path: target.path, mode: .readOnly))
        let info = SnapshotInfo(
            sha256: try FileDigest.sha256Hex(of: target), version: metadata.version,
            schemaVersion: metadata.schemaVersion, dataset: metadata.dataset)
        let stats = TransferStats(fileBytes: FileIdentity.size(of: target), encoding: .identity)
        logger.info(
            "composed database.db from its streams",
            metadata: [
                "partitions": "\(partitions.count)", "rows": "\(outcome.rows)",
                "held": "\(outcome.held.values.reduce(0, +))",
            ])
        return Composition(
            verified: .init(info: info, stats: stats, file: target, path: .full), inputs: inputs, held: outcome.held)
    }

    /// A stream file's identity for ``Subscriptions/composed`` (a verified version replaces the file by rename, so a
    /// new version is a new inode); nil when there is no file.
    static func identity(_ file: URL) throws -> String? {
        guard let identity = try FileIdentity.read(file) else { return nil }
        return "\(identity.inode)-\(identity.size)-\(identity.modified)"
    }

    /// Removes the stream directories of partitions neither subscribed nor being left (their rows are gone from the
    /// installed composition).
    func removeStreams(except subscriptions: Subscriptions) throws {
        let kept = Set(subscriptions.activeStreams + subscriptions.leaving.map(PartitionStream.partition))
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory.streamsDirectory.path)
        } catch {
            // No stream directory yet: nothing to remove.
            guard directory.exists(directory.streamsDirectory) else { return }
            throw ClientDirectory.ioError(
                "cannot list the partition streams: \(error.localizedDescription)", directory.streamsDirectory)
        }
        for name in names where !(PartitionStream(directoryName: name).map(kept.contains) ?? false) {
            try DurableFile.remove(directory.streamsDirectory.appendingPathComponent(name))
            logger.info("partition dropped from the device", metadata: ["stream": "\(name)"])
        }
    }
}

/// One subscribed partition in ``ClientStatus/partitions``: its key, the version of its stream on the device and
/// the rows of that version.
///
/// ```swift
/// for p in try await client.status().partitions ?? [] { print(p.key, p.version ?? 0, p.rows) }
/// ```
public struct PartitionStatus: Sendable, Equatable, Codable {
    /// The partition's key.
    public var key: String
    /// The version of the partition's stream on the device, nil before its first download.
    public var version: Int?
    /// The rows of that version (all tables).
    public var rows: Int

    public init(key: String, version: Int?, rows: Int) {
        self.key = key
        self.version = version
        self.rows = rows
    }
}

extension ClientDirectory {
    /// The subscribed partitions' versions and rows; nil for an unpartitioned directory.
    func partitionStatus() throws -> [PartitionStatus]? {
        guard let subscriptions = try Subscriptions.load(from: subscriptionsFile) else { return nil }
        return try subscriptions.keys.map { key in
            let file = directory(of: .partition(key)).database
            guard exists(file) else { return PartitionStatus(key: key, version: nil, rows: 0) }
            let metadata = try SnapshotMetadata.read(from: SQLiteConnection(path: file.path, mode: .readOnly))
            return PartitionStatus(key: key, version: metadata.version, rows: metadata.tables.map(\.rows).reduce(0, +))
        }
    }
}
