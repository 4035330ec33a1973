import Crypto

/// Incremental SHA-256 over raw buffers, giving lowercase hex.
struct FileHasher {
    private var hasher = SHA256()

    mutating func update(_ bytes: UnsafeRawBufferPointer) { hasher.update(bufferPointer: bytes) }

    mutating func finalizeHex() -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        for byte in hasher.finalize() {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
