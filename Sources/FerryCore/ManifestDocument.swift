import Foundation

/// A manifest as a JSON document: ``Manifest``, what a device reads, and the form the snapshot store keeps. Its
/// JSON is compact with sorted keys, so equal manifests give equal bytes; reading one checks it before anything
/// relies on it.
///
/// ```swift
/// let data = try manifest.jsonData()
/// let same = try Manifest.decode(data, path: "campgrounds/manifest.json")  // FerryError(.store) when malformed
/// ```
public protocol ManifestDocument: Codable {
    /// Checks the fields a reader relies on (never trust a file or the network); throws a ``FerryError`` naming
    /// `path`.
    func validate(path: String?) throws
}

extension ManifestDocument {
    /// Encodes as compact JSON with sorted keys (stable bytes for equal manifests); `pretty` indents it for people.
    ///
    /// ```swift
    /// try manifest.jsonData(pretty: true)
    /// ```
    public func jsonData(pretty: Bool = false) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting =
            pretty ? [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
    }

    /// Decodes and validates a manifest: JSON of another shape is a `store` error naming `path`, and so is a
    /// field ``validate(path:)`` refuses.
    ///
    /// ```swift
    /// let manifest = try Manifest.decode(data, path: url.path)
    /// ```
    public static func decode(_ data: Data, path: String? = nil) throws -> Self {
        let manifest: Self
        do {
            manifest = try JSONDecoder().decode(Self.self, from: data)
        } catch {
            throw FerryError(.store, "manifest is not valid JSON of the expected shape: \(error)", path: path)
        }
        try manifest.validate(path: path)
        return manifest
    }
}
