import FerryCore
import Foundation

/// The SHA-256 of each object in a bucket publisher's cache, kept by the file's identity (device, inode, size and
/// modification time), so a publish re-hashes a cached file only when it is new or was changed, not on every publish.
/// Saved beside the cache's manifest (`CACHE/DATASET/cached-digests.json`); an unreadable or missing list only means
/// the files are hashed once more.
///
/// A file enters the list when it was hashed (a cached file checked against its name), downloaded (the download
/// hashed the bytes as they arrived) or stored by the publish under its name (the store hashed it while storing).
/// Every method blocks (`stat`, reading and writing the list): ``BucketPublisher`` calls them on the publish lane
/// (`ThreadJob.run`).
struct CachedDigests: Sendable {
    /// What tells one file apart from another, or from itself after a write.
    struct Identity: Codable, Equatable, Sendable {
        var device: UInt64
        var inode: UInt64
        var size: Int64
        /// Seconds since 1970, as precise as the file system keeps them.
        var modified: Double
    }

    struct Entry: Codable, Equatable, Sendable {
        var identity: Identity
        var sha256: String
    }

    /// By object name (`<sha256>.sqlite`, …).
    private(set) var entries: [String: Entry]
    let url: URL
    /// True when ``entries`` differ from the list saved at ``url``.
    private(set) var changed = false

    /// The list saved at `url`, or an empty one when there is none or it cannot be read (the files are then hashed
    /// again, which costs time, never correctness).
    static func load(from url: URL) -> CachedDigests {
        // Missing or unreadable: every file is hashed again (time, never correctness).
        let entries = (try? Data(contentsOf: url)).flatMap { try? JSONDecoder().decode([String: Entry].self, from: $0) }
        return CachedDigests(entries: entries ?? [:], url: url)
    }

    /// The identity of `file` now, or nil when it does not exist.
    static func identity(of file: URL) throws -> Identity? {
        guard FileManager.default.fileExists(atPath: file.path) else { return nil }
        let attributes: [FileAttributeKey: Any]
        do {
            attributes = try FileManager.default.attributesOfItem(atPath: file.path)
        } catch {
            throw FerryError(
                .io, "cannot read a cached file's attributes: \(error.localizedDescription)", path: file.path)
        }
        return Identity(
            device: (attributes[.systemNumber] as? NSNumber)?.uint64Value ?? 0,
            inode: (attributes[.systemFileNumber] as? NSNumber)?.uint64Value ?? 0,
            size: (attributes[.size] as? NSNumber)?.int64Value ?? 0,
            modified: (attributes[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0)
    }

    /// The SHA-256 of `file` (object `name`): the kept one while the file's identity is unchanged, else hashed now
    /// (and `hashed` is called) and kept.
    mutating func sha256(of file: URL, name: String, hashed: () -> Void = {}) throws -> String {
        let identity = try Self.identity(of: file)
        if let identity, let entry = entries[name], entry.identity == identity { return entry.sha256 }
        hashed()
        let sha256 = try FileDigest.sha256Hex(of: file)
        if let identity { set(Entry(identity: identity, sha256: sha256), for: name) }
        return sha256
    }

    /// Keeps `sha256` as the digest of `file` (object `name`) as it is now: one the caller computed or trusts.
    mutating func record(_ sha256: String, of file: URL, name: String) throws {
        if let identity = try Self.identity(of: file) { set(Entry(identity: identity, sha256: sha256), for: name) }
    }

    /// Forgets the objects not in `names` (pruned from the cache).
    mutating func keep(only names: Set<String>) {
        let kept = entries.filter { names.contains($0.key) }
        if kept.count != entries.count {
            entries = kept
            changed = true
        }
    }

    private mutating func set(_ entry: Entry, for name: String) {
        if entries[name] != entry {
            entries[name] = entry
            changed = true
        }
    }

    /// Writes the list (fsynced, then renamed into place) when it changed since it was loaded.
    func save() throws {
        guard changed else { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try DurableFile.write(try encoder.encode(entries), to: url)
    }
}
