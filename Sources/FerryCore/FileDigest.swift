import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// SHA-256 of files and bytes, as lowercase hex and as the base64 form that `Repr-Digest` uses.
///
/// ```swift
/// let hex = try FileDigest.sha256Hex(of: URL(fileURLWithPath: "snapshot.sqlite"))
/// ```
public enum FileDigest {
    /// Streams a file through SHA-256 in 1 MiB chunks (memory stays flat) and returns lowercase hex.
    public static func sha256Hex(of url: URL) throws -> String {
        try sha256(of: url).hex
    }

    /// Streams a file through SHA-256 and returns the digest.
    public static func sha256(of url: URL) throws -> SHA256.Digest {
        var hasher = SHA256()
        try forEachChunk(of: url) { hasher.update(bufferPointer: $0) }
        return hasher.finalize()
    }

    /// Hands the first `count` bytes of a file (all of them when nil) to `body`, in pieces of up to 1 MiB read into
    /// one buffer; returns how many it read, fewer than `count` when the file is shorter.
    @discardableResult
    public static func forEachChunk(
        of url: URL, first count: Int64? = nil, _ body: (UnsafeRawBufferPointer) throws -> Void
    ) throws -> Int64 {
        let fd = open(url.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw DurableFile.posixError("cannot open", url.path) }
        defer { close(fd) }
        let limit = count ?? .max
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(min(max(limit, 1), 1 << 20)), alignment: 16)
        defer { chunk.deallocate() }
        var done: Int64 = 0
        while done < limit {
            let n = read(fd, chunk.baseAddress!, Int(min(limit - done, Int64(chunk.count))))
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw DurableFile.posixError("cannot read", url.path) }
            guard n > 0 else { break }
            try body(UnsafeRawBufferPointer(rebasing: chunk[..<n]))
            done += Int64(n)
        }
        return done
    }

    /// SHA-256 of some bytes as lowercase hex.
    ///
    /// ```swift
    /// FileDigest.sha256Hex(bytes: Array("alice-token".utf8))
    /// ```
    public static func sha256Hex(bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).hex
    }

    /// Converts a hex SHA-256 into the RFC 9530 `Repr-Digest` value `sha-256=:<base64>:`.
    public static func reprDigest(hex: String) -> String? {
        guard let bytes = bytes(fromHex: hex) else { return nil }
        return "sha-256=:\(Data(bytes).base64EncodedString()):"
    }

    /// Decodes lowercase or uppercase hex into bytes.
    public static func bytes(fromHex hex: String) -> [UInt8]? {
        let utf8 = Array(hex.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(utf8.count / 2)
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: return c - 48
            case 97...102: return c - 87
            case 65...70: return c - 55
            default: return nil
            }
        }
        var i = 0
        while i < utf8.count {
            guard let hi = nibble(utf8[i]), let lo = nibble(utf8[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }
}

extension Digest {
    /// Lowercase hex of the digest.
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(Self.byteCount * 2)
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
