import FerryCore

/// What the store keeps about one published version: the ``PublishedVersion`` (whose `sha256` names its object,
/// `objects/<sha256>.sqlite`) plus the digest of the exported rows, which lets the publisher tell "unchanged"
/// without comparing files. Listed in the store's ``StoredManifest``; never sent to clients.
@dynamicMemberLookup
public struct VersionRecord: Codable, Sendable, Equatable {
    public var published: PublishedVersion
    /// SHA-256 hex over the exported rows and schema (not the file bytes, whose metadata differs per version).
    public var dataDigest: String

    public init(published: PublishedVersion, dataDigest: String) {
        self.published = published
        self.dataDigest = dataDigest
    }

    /// `record.version`, `record.sha256`, …: the published version's fields.
    public subscript<T>(dynamicMember keyPath: WritableKeyPath<PublishedVersion, T>) -> T {
        get { published[keyPath: keyPath] }
        set { published[keyPath: keyPath] = newValue }
    }

    private enum CodingKeys: String, CodingKey { case dataDigest }

    public init(from decoder: any Decoder) throws {
        published = try PublishedVersion(from: decoder)
        dataDigest = try decoder.container(keyedBy: CodingKeys.self).decode(String.self, forKey: .dataDigest)
    }

    public func encode(to encoder: any Encoder) throws {
        try published.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(dataDigest, forKey: .dataDigest)
    }
}
