import FerryCore

/// What the store keeps about one published version: the ``PublishedVersion`` (whose `sha256` names its object,
/// `objects/<sha256>.sqlite`) plus the digest of the exported rows, which lets the publisher tell "unchanged"
/// without comparing files. Listed in the store's ``StoredManifest``; never sent to clients.
///
/// A version is stored one of two ways (docs/delta.md, "Checkpoints and steps"): a **checkpoint** has its full
/// files, `objects/<sha256>.sqlite` and its gzip copy; an ordinary version has only its ``step``, the patch from the
/// previous version, and its file is built from the nearest checkpoint by ``Materializer``. A checkpoint cut by
/// size or age has a step too: the steps are the scope's history, from which a server makes a device's catch-up
/// patch (docs/delta.md, "Catching up").
@dynamicMemberLookup
public struct VersionRecord: Codable, Sendable, Equatable {
    public var published: PublishedVersion
    /// SHA-256 hex over the exported rows and schema (not the file bytes, whose metadata differs per version).
    public var dataDigest: String
    /// The patch from the previous version (`objects/<sha256>.patch.gz`); nil for a scope's first version, after a
    /// schema version bump, and in records written before steps existed.
    public var step: PatchRef?
    /// Whether the store holds this version's full files. Nil in records written before steps existed: those are
    /// all checkpoints.
    public var checkpoint: Bool?
    /// True when the history's tiers merged the steps before this version (or before a version since the last
    /// checkpoint that leads to it): the rows are the same, but a file built by the merged steps is not the
    /// recorded one byte for byte, so this version stays only as a point to catch up from and its whole file is no
    /// longer served (`410`; docs/delta.md, "A bounded history"). Nil: it can be built whole.
    public var catchUpOnly: Bool?

    public init(
        published: PublishedVersion, dataDigest: String, step: PatchRef? = nil, checkpoint: Bool? = nil,
        catchUpOnly: Bool? = nil
    ) {
        self.published = published
        self.dataDigest = dataDigest
        self.step = step
        self.checkpoint = checkpoint
        self.catchUpOnly = catchUpOnly
    }

    /// Whether the store holds this version's full files (a checkpoint) rather than only its step.
    public var isCheckpoint: Bool { checkpoint ?? (step == nil) }

    /// The store objects this record names: its full files' checksum (a checkpoint), its step's and its patches'.
    public var objectChecksums: [String] {
        (isCheckpoint ? [published.sha256] : []) + (step.map { [$0.sha256] } ?? [])
            + (published.patches ?? []).map(\.sha256)
    }

    /// `record.version`, `record.sha256`, …: the published version's fields.
    public subscript<T>(dynamicMember keyPath: WritableKeyPath<PublishedVersion, T>) -> T {
        get { published[keyPath: keyPath] }
        set { published[keyPath: keyPath] = newValue }
    }

    private enum CodingKeys: String, CodingKey { case dataDigest, step, checkpoint, catchUpOnly }

    public init(from decoder: any Decoder) throws {
        published = try PublishedVersion(from: decoder)
        let container = try decoder.container(keyedBy: CodingKeys.self)
        dataDigest = try container.decode(String.self, forKey: .dataDigest)
        step = try container.decodeIfPresent(PatchRef.self, forKey: .step)
        checkpoint = try container.decodeIfPresent(Bool.self, forKey: .checkpoint)
        catchUpOnly = try container.decodeIfPresent(Bool.self, forKey: .catchUpOnly)
    }

    public func encode(to encoder: any Encoder) throws {
        try published.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(dataDigest, forKey: .dataDigest)
        try container.encodeIfPresent(step, forKey: .step)
        try container.encodeIfPresent(checkpoint, forKey: .checkpoint)
        try container.encodeIfPresent(catchUpOnly, forKey: .catchUpOnly)
    }
}
