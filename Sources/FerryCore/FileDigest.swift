import Crypto
import Foundation

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
        guard let handle = FileHandle(forReadingAtPath: url.path) else {
            throw FerryError(.io, "cannot open file for hashing", path: url.path)
        }
        defer { try? handle.close() }  // read-only: closing cannot lose data
        var hasher = SHA256()
        while true {
            let chunk: Data?
            do { chunk = try handle.read(upToCount: 1 << 20) } catch {
                throw FerryError(.io, "cannot read file: \(error.localizedDescription)", path: url.path)
            }
            guard let chunk, !chunk.isEmpty else { break }
            hasher.update(data: chunk)
        }
        return hasher.finalize()
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
