import FerryCore
import Foundation

/// `DIR/.ferry/subscriptions.json`: the partitions a device carries, written atomically (temp file, fsync, rename).
/// Its presence makes the directory a partitioned one: a fetch then brings the shared stream and every subscribed
/// partition up to date and composes `database.db` from them.
///
/// ```json
/// {"dataset":"projects","keys":["1","7"],"leaving":["3"],
///  "layout":{"partition":{"table":"projects","key":"id"},"tables":[…]},
///  "composed":{"shared":"<sha256>","p-31":"<sha256>"}}
/// ```
struct Subscriptions: Codable, Equatable, Sendable {
    /// The dataset's base name.
    var dataset: String
    /// The subscribed partitions' keys, sorted.
    var keys: [String] = []
    /// Keys unsubscribed whose stream is still kept: their rows that queued edits name stay in `database.db` until
    /// the edits are answered.
    var leaving: [String] = []
    /// The layout the server listed at the last subscribe (to check device inserts).
    var layout: PartitionLayout
    /// What the last composition was made of: each stream's directory name and the checksum of its file, plus
    /// `held:` entries for leaving streams; nil before the first. The next fetch composes again only when it differs.
    var composed: [String: String]? = nil

    static let fileName = "subscriptions.json"

    /// The subscriptions of the directory, nil when it is not a partitioned one. A file that cannot be read or parsed
    /// is an error naming it: without it the device cannot tell which partitions it carries.
    static func load(from url: URL) throws -> Subscriptions? {
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        do {
            return try JSONDecoder().decode(Subscriptions.self, from: Data(contentsOf: url))
        } catch {
            throw FerryError(
                .io,
                "cannot read the device's partition subscriptions (\(error.localizedDescription)); subscribe again with `ferry subscribe` after removing the file",
                path: url.path, underlying: error)
        }
    }

    /// Writes the file durably.
    func save(to url: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try DurableFile.write(try encoder.encode(self), to: url)
    }

    /// The streams a fetch keeps current: the shared one and every subscribed partition.
    var activeStreams: [PartitionStream] { [.shared] + keys.map(PartitionStream.partition) }

    /// Adds `added` (none already there twice); a key that was leaving is simply subscribed again.
    mutating func subscribe(_ added: [String]) {
        keys = Array(Set(keys).union(added)).sorted()
        leaving.removeAll { added.contains($0) }
    }

    /// Moves `removed` from the subscribed keys to the leaving ones. Throws, naming it, for a key not subscribed.
    mutating func unsubscribe(_ removed: [String]) throws {
        for key in removed where !keys.contains(key) {
            throw FerryError(
                .notFound,
                "partition '\(key)' of dataset '\(dataset)' is not subscribed on this device (subscribed: \(keys.isEmpty ? "none" : keys.joined(separator: ", ")))",
                key: key)
        }
        keys.removeAll { removed.contains($0) }
        leaving = Array(Set(leaving).union(removed)).sorted()
    }
}

extension ClientDirectory {
    /// `DIR/.ferry/subscriptions.json` (see ``Subscriptions``).
    var subscriptionsFile: URL { privateDirectory.appendingPathComponent(Subscriptions.fileName) }
    /// `DIR/.ferry/streams/`: one client directory per stream of a partitioned dataset.
    var streamsDirectory: URL { privateDirectory.appendingPathComponent("streams", isDirectory: true) }
    /// Where `stream` is kept.
    func directory(of stream: PartitionStream) -> ClientDirectory {
        ClientDirectory(streamsDirectory.appendingPathComponent(stream.directoryName, isDirectory: true))
    }
    /// Where a composition is written before it is installed (a `.tmp`: removed as a leftover after a crash).
    var composing: URL { privateDirectory.appendingPathComponent("composing.sqlite.tmp") }
}
