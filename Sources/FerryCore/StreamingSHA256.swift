import Crypto

/// Incremental SHA-256 over bytes fed in pieces (e.g. a COPY stream), for modules that do not link swift-crypto.
///
/// ```swift
/// var digest = StreamingSHA256()
/// digest.update("schemaVersion=1")
/// let hex = digest.finalizeHex()
/// ```
public struct StreamingSHA256: Sendable {
    private var hasher = SHA256()

    public init() {}

    /// Feeds raw bytes.
    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        hasher.update(bufferPointer: bytes)
    }

    /// Feeds bytes.
    public mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { hasher.update(bufferPointer: $0) }
    }

    /// Feeds a string's UTF-8 bytes.
    public mutating func update(_ text: String) {
        var text = text
        text.withUTF8 { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
    }

    /// Lowercase hex of the digest of everything fed so far.
    public func finalizeHex() -> String {
        hasher.finalize().hex
    }
}
