import FerryCore

/// The content-addressed name of one stored representation, as it appears in
/// `/v1/datasets/{dataset}/objects/{object}`: `<sha256>.sqlite` (a snapshot), `<sha256>.sqlite.gz` (its gzip copy,
/// named by the snapshot's checksum like its ETag) or `<sha256>.patch.gz` (a patch, named by its own checksum).
/// The same names as the files in the store's `objects/` directory, so a bucket or CDN can use them as they are.
///
/// ```swift
/// ObjectName("9f86…08.sqlite.gz")?.kind == .snapshotGzip
/// ```
struct ObjectName: Hashable, Sendable, CustomStringConvertible {
    enum Kind: String, CaseIterable, Sendable {
        case snapshot = ".sqlite"
        case snapshotGzip = ".sqlite.gz"
        case patch = ".patch.gz"
        /// An attachment (`/attachments/<sha256>`): never an object URL, so ``ObjectName/init(_:)`` never parses
        /// it (a name is longer than 64 characters).
        case attachment = ""
    }

    let sha256: String
    let kind: Kind

    init(sha256: String, kind: Kind) {
        self.sha256 = sha256
        self.kind = kind
    }

    /// Parses a name: 64 lowercase hex digits and one of the three suffixes, nothing else (no path, no
    /// upper case, so each object has exactly one URL).
    init?(_ text: String) {
        guard text.utf8.count > 64 else { return nil }
        let hex = String(text.prefix(64))
        guard SHA256Hex.isValid(hex),
            let kind = Kind.allCases.first(where: { String(text.dropFirst(64)) == $0.rawValue })
        else { return nil }
        self.init(sha256: hex, kind: kind)
    }

    var description: String { sha256 + kind.rawValue }
}
