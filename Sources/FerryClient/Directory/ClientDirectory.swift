import FerryCore
import Foundation

/// The files of a client directory (`--dir DIR`) and the crash-safe steps that move them.
///
/// ```
/// DIR/database.db            the live database the app reads; never written in place by a fetch
/// DIR/updated.db             a verified snapshot waiting to be applied (state updatePending)
/// DIR/previous.db            the version before the last apply; rollback() puts it back
/// DIR/.ferry/partial.sqlite  a download in progress: the SQLite file's bytes so far
/// DIR/.ferry/partial.gz      the compressed bytes received so far, when the download is of the gzip copy (resumed
///                            with Range + If-Range: "<sha256>-gzip"; re-inflated into partial.sqlite on resume)
/// DIR/.ferry/partial.json    what the partial download was promised to become and where from:
///                            {"dataset","expected":{"sha256","size","version"},"source":{"url","encoding","size","etag"}}
/// DIR/.ferry/state.json      checksum cache (by inode, size, mtime) and versions refused by rollback or schema
/// DIR/.ferry/lock            held by the one FerryClient using the directory
/// DIR/.ferry/client-id       this directory's device id, a random UUID made at its first request (sent as
///                            Ferry-Device and as the change batches' clientId; never personal data)
/// DIR/.ferry/previous.db.tmp a hard link made during apply; garbage after a crash
/// DIR/.ferry/adopted-*.sqlite a background download being verified (FerryClient.adoptBackgroundDownload); garbage
///                            after a crash
/// DIR/.ferry/attachments/   the device's attachments and their upload queue (see ``DeviceAttachments``)
/// ```
///
/// ```swift
/// let dir = ClientDirectory(URL(fileURLWithPath: "/data/ferry"))
/// print(dir.database.path)   // /data/ferry/database.db
/// ```
public struct ClientDirectory: Sendable, Equatable {
    public let url: URL

    public init(_ url: URL) {
        self.url = url.standardizedFileURL
    }

    /// `DIR/database.db`, the live database.
    public var database: URL { url.appendingPathComponent("database.db") }
    /// `DIR/updated.db`, the verified pending update.
    public var updated: URL { url.appendingPathComponent("updated.db") }
    /// `DIR/previous.db`, what rollback restores.
    public var previous: URL { url.appendingPathComponent("previous.db") }
    var privateDirectory: URL { url.appendingPathComponent(".ferry", isDirectory: true) }
    var partial: URL { privateDirectory.appendingPathComponent("partial.sqlite") }
    var partialGzip: URL { privateDirectory.appendingPathComponent("partial.gz") }
    var partialRecord: URL { privateDirectory.appendingPathComponent("partial.json") }
    /// Where a patch is applied to a copy of the device's database before it becomes `updated.db`.
    var patched: URL { privateDirectory.appendingPathComponent("patched.sqlite") }
    var stateFile: URL { privateDirectory.appendingPathComponent("state.json") }
    var lockFile: URL { privateDirectory.appendingPathComponent("lock") }
    var deviceIDFile: URL { privateDirectory.appendingPathComponent("client-id") }
    var previousLink: URL { privateDirectory.appendingPathComponent("previous.db.tmp") }
    /// A new name for a background download being verified before it is installed (one per adoption, so two never
    /// share a file).
    func adopted() -> URL {
        privateDirectory.appendingPathComponent("\(Self.adoptedPrefix)\(UUID().uuidString).sqlite")
    }
    static let adoptedPrefix = "adopted-"

    func exists(_ file: URL) -> Bool { FileManager.default.fileExists(atPath: file.path) }

    /// The directory's device id (`.ferry/client-id`): read back when it holds a UUID, else a new random UUID written
    /// durably (temp file, fsync, rename) and returned. Sent as `Ferry-Device` with every request and as each change
    /// batch's `clientId`; it says which directory asked, nothing about the person using it.
    func deviceID() throws -> String {
        if let data = FileManager.default.contents(atPath: deviceIDFile.path),
            let text = String(data: data, encoding: .utf8)?.trimmingCharacters(in: .whitespacesAndNewlines),
            UUID(uuidString: text) != nil
        {
            return text
        }
        let id = UUID().uuidString.lowercased()
        try DurableFile.write(Data(id.utf8), to: deviceIDFile)
        return id
    }

    /// Creates `DIR` and `DIR/.ferry` when missing.
    func create() throws {
        try DurableFile.makeDirectory(privateDirectory)
    }

    /// Removes what a crash can leave in `.ferry`: the apply's hard link, partial download files without their
    /// record (or a record without them), a half-patched copy and a background download being adopted.
    /// Throws when `.ferry` cannot be listed or a leftover cannot be removed.
    func removeLeftovers() throws {
        let fm = FileManager.default
        let names: [String]
        do {
            names = try fm.contentsOfDirectory(atPath: privateDirectory.path)
        } catch {
            throw ClientDirectory.ioError(
                "cannot list the client's private directory: \(error.localizedDescription)", privateDirectory)
        }
        for name in names {
            // A file being adopted, or one an apply was writing, when the process stopped.
            let interrupted: String
            if name.hasPrefix(Self.adoptedPrefix) {
                interrupted = "adoption"
            } else if name.hasSuffix(".tmp") {
                interrupted = "apply"
            } else {
                continue
            }
            let leftover = privateDirectory.appendingPathComponent(name)
            do {
                try fm.removeItem(at: leftover)
            } catch {
                throw ClientDirectory.ioError(
                    "cannot remove a leftover of an interrupted \(interrupted): \(error.localizedDescription)", leftover
                )
            }
        }
        if (exists(partial) || exists(partialGzip)) != exists(partialRecord) { discardPartial() }
        // A patch being applied when the process died: scratch, rebuilt by the next fetch.
        for scratch in [patched.path, patched.path + "-journal"] where fm.fileExists(atPath: scratch) {
            do {
                try fm.removeItem(atPath: scratch)
            } catch {
                throw ClientDirectory.ioError(
                    "cannot remove a leftover of an interrupted patch: \(error.localizedDescription)",
                    URL(fileURLWithPath: scratch))
            }
        }
    }

    /// Deletes the partial download and its record.
    /// A partial that cannot be removed is harmless: before any use it is verified end to end against the checksum the
    /// server promises, and refused when it does not match.
    func discardPartial() {
        // Harmless if it stays (see above); a missing file is the usual case.
        try? FileManager.default.removeItem(at: partial)
        try? FileManager.default.removeItem(at: partialGzip)  // as above
        // As above: a record without its partial file is dropped on the next open (removeLeftovers).
        try? FileManager.default.removeItem(at: partialRecord)
    }

    // MARK: The swap

    /// One step of apply or rollback. Each is atomic on its own (a rename or link followed by a directory fsync),
    /// and after every prefix of a plan `database.db` is a complete published version (see
    /// ``applyPlan(hasDatabase:)``).
    enum SwapStep: Equatable, Sendable, CaseIterable {
        /// Hard-link `database.db` to `.ferry/previous.db.tmp` (a fresh copy where links are unsupported).
        case linkLiveToTemp
        /// Rename `.ferry/previous.db.tmp` over `previous.db`: now previous.db and database.db are the same file.
        case replacePrevious
        /// Rename `updated.db` over `database.db`: the one instant the live version changes.
        case installUpdate
        /// Rename `previous.db` over `database.db` (rollback).
        case restorePrevious
    }

    /// The steps of apply. The live file is never absent: it is linked to previous.db first, and then replaced by
    /// one rename. A crash after step 1 or 2 leaves the old version live and the update still pending.
    static func applyPlan(hasDatabase: Bool) -> [SwapStep] {
        hasDatabase ? [.linkLiveToTemp, .replacePrevious, .installUpdate] : [.installUpdate]
    }

    /// Performs one swap step durably.
    func perform(_ step: SwapStep) throws {
        switch step {
        case .linkLiveToTemp:
            if exists(previousLink) {
                do {
                    try FileManager.default.removeItem(at: previousLink)
                } catch {
                    throw ClientDirectory.ioError(
                        "cannot remove a leftover of an interrupted apply: \(error.localizedDescription)", previousLink)
                }
            }
            do {
                try FileManager.default.linkItem(at: database, to: previousLink)
            } catch {
                // File systems without hard links (or a file at its link limit): a full copy, synced, is as safe
                // (only slower).
                try FileClone.copyDurably(
                    database, to: previousLink, "cannot keep a copy of database.db as previous.db",
                    fix: "free space and apply again (database.db, previous.db and the pending update are unchanged)")
            }
            try DurableFile.syncDirectory(privateDirectory)
        case .replacePrevious:
            // rename(2) between two links of one file does nothing and leaves both (after a crash between the
            // previous apply's steps, previous.db already is database.db): drop the extra link instead.
            if let link = FileIdentity.of(previousLink), let old = FileIdentity.of(previous), link.inode == old.inode {
                try FileManager.default.removeItem(at: previousLink)
                try DurableFile.syncDirectory(privateDirectory)
            } else {
                try DurableFile.rename(previousLink, to: previous)
            }
        case .installUpdate:
            try DurableFile.rename(updated, to: database)
        case .restorePrevious:
            try DurableFile.rename(previous, to: database)
        }
    }

    /// SQLite files that belong to `database.db` (`-wal`, `-journal`). Swapping the file under one of them would let
    /// SQLite replay the old journal into the new database, so apply and rollback refuse while they exist.
    func databaseSidecars() -> [URL] {
        ["-wal", "-journal"].map { URL(fileURLWithPath: database.path + $0) }.filter { exists($0) }
    }

    static func ioError(_ message: String, _ url: URL) -> FerryError {
        FerryError(.io, message, path: url.path)
    }
}

/// `stat` facts that tell whether a file is still the one whose checksum was cached.
struct FileIdentity: Codable, Equatable, Sendable {
    var inode: UInt64
    var size: Int64
    /// Modification time, seconds since 1970.
    var modified: Double

    /// Reads the identity of `url`, nil when it does not exist; throws when it exists but cannot be examined.
    static func read(_ url: URL) throws -> FileIdentity? {
        let attributes: [FileAttributeKey: Any]
        do {
            attributes = try FileManager.default.attributesOfItem(atPath: url.path)
        } catch {
            guard FileManager.default.fileExists(atPath: url.path) else { return nil }
            throw FerryError(
                .io, "cannot examine the file: \(error.localizedDescription)", path: url.path, underlying: error)
        }
        let inode = (attributes[.systemFileNumber] as? NSNumber)?.uint64Value ?? 0
        let size = (attributes[.size] as? NSNumber)?.int64Value ?? 0
        let modified = (attributes[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0
        return FileIdentity(inode: inode, size: size, modified: modified)
    }

    /// The identity of `url` for cache bookkeeping, nil when it does not exist or cannot be examined. Where nil would
    /// be taken for "there is no such file", use ``read(_:)``.
    static func of(_ url: URL) -> FileIdentity? {
        // A file that cannot be examined is not cached: the next status examines it again (with read, which throws).
        try? read(url)
    }

    /// Size of `url` in bytes, nil when it does not exist or cannot be examined.
    static func size(of url: URL) -> Int64? { of(url)?.size }
}
