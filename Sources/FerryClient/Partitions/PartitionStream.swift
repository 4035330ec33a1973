import FerryCore
import Foundation

/// One stream of a partitioned dataset: the shared tables, or one partition. On the server it is read under
/// `/v1/datasets/{dataset}/shared/…` or `/v1/datasets/{dataset}/partitions/{key}/…`; on the device it is an ordinary
/// client directory under `DIR/.ferry/streams/` whose `database.db` is the stream's verified file as published.
enum PartitionStream: Hashable, Sendable, Comparable {
    case shared
    case partition(String)

    /// The path segments after the dataset's name, unencoded (the URL builder percent-encodes each).
    var pathSegments: [String] {
        switch self {
        case .shared: return ["shared"]
        case .partition(let key): return ["partitions", key]
        }
    }

    /// The stream's directory name under `.ferry/streams/`: `shared`, or `p-` and the key's UTF-8 bytes in hex (a key
    /// may hold any character but control characters, a file name may not).
    var directoryName: String {
        switch self {
        case .shared: return "shared"
        case .partition(let key): return "p-" + key.utf8.map { String(format: "%02x", $0) }.joined()
        }
    }

    /// The stream a directory name names, nil for a name no stream has.
    init?(directoryName name: String) {
        if name == "shared" {
            self = .shared
            return
        }
        guard name.hasPrefix("p-") else { return nil }
        let hex = Array(name.utf8.dropFirst(2))
        guard !hex.isEmpty, hex.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        for i in stride(from: 0, to: hex.count, by: 2) {
            guard let byte = UInt8(String(decoding: hex[i..<i + 2], as: UTF8.self), radix: 16) else { return nil }
            bytes.append(byte)
        }
        guard let key = String(validating: bytes, as: UTF8.self) else { return nil }
        self = .partition(key)
    }

    /// The partition's key, nil for the shared stream.
    var key: String? {
        if case .partition(let key) = self { return key }
        return nil
    }

    /// Characters a path segment keeps as they are (RFC 3986 unreserved); every other byte is percent-encoded.
    private static let unreserved = CharacterSet(
        charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    /// `base` followed by `segments`, each percent-encoded as one path segment (a `/` in a key stays inside it).
    static func url(_ base: URL, appending segments: [String]) -> URL {
        guard !segments.isEmpty else { return base }
        var text = base.absoluteString
        while text.hasSuffix("/") { text.removeLast() }
        for segment in segments {
            text += "/" + (segment.addingPercentEncoding(withAllowedCharacters: unreserved) ?? segment)
        }
        // Made of a valid URL and percent-encoded segments: always a valid URL.
        return URL(string: text)!
    }

    /// Refuses a key the server could not have published: empty, longer than 200 bytes, or with control characters.
    static func validate(key: String) throws {
        guard PartitionLayout.isValidKey(key) else {
            throw FerryError(
                .badInput,
                "'\(key.prefix(40).unicodeScalars.map { $0.properties.generalCategory == .control ? "?" : String($0) }.joined())' is not a partition key: a key is 1 to 200 bytes without control characters",
                key: "key")
        }
    }

    static func < (a: PartitionStream, b: PartitionStream) -> Bool {
        switch (a, b) {
        case (.shared, .partition): return true
        case (.partition(let x), .partition(let y)): return x < y
        default: return false
        }
    }
}
