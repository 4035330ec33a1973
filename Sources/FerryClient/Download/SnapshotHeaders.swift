import FerryCore
import Foundation

/// Parsers for the snapshot response headers. Everything from the network is validated here; nothing is trusted.
enum SnapshotHeaders {
    /// `"<64 lowercase hex>"` → the hex. Weak (`W/…`) or malformed tags are nil: they cannot verify bytes.
    static func strongSHA256ETag(_ value: String?) -> String? {
        guard let value else { return nil }
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        guard trimmed.count == 66, trimmed.hasPrefix("\""), trimmed.hasSuffix("\"") else { return nil }
        let hex = trimmed.dropFirst().dropLast().lowercased()
        return SHA256Hex.isValid(hex) ? String(hex) : nil
    }

    /// A Ferry snapshot ETag → the SQLite file's SHA-256 and the representation it names: `"<hex>"` is the file
    /// itself, `"<hex>-gzip"` its gzip copy. Weak or malformed tags are nil.
    static func entityTag(_ value: String?) -> (sha256: String, encoding: TransferEncoding)? {
        guard let value else { return nil }
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if trimmed.hasSuffix("-gzip\"") {
            return strongSHA256ETag(String(trimmed.dropLast("-gzip\"".count)) + "\"").map { ($0, .gzip) }
        }
        return strongSHA256ETag(trimmed).map { ($0, .identity) }
    }

    /// `Content-Encoding` → the representation: absent or `identity` is the file itself, `gzip` (or `x-gzip`) the
    /// gzip copy; anything else (another coding, several codings) is nil, a body the client cannot read.
    static func contentEncoding(_ value: String?) -> TransferEncoding? {
        guard let value else { return .identity }
        switch value.trimmingCharacters(in: .whitespaces).lowercased() {
        case "", "identity": return .identity
        case "gzip", "x-gzip": return .gzip
        default: return nil
        }
    }

    /// RFC 9530 `Repr-Digest: sha-256=:<base64>:` (possibly among other algorithms) → the SHA-256 as hex.
    /// Returns nil when there is no sha-256 member; throws when there is one but it is malformed.
    static func reprDigestSHA256(_ value: String?) throws -> String? {
        guard let value else { return nil }
        for member in value.split(separator: ",") {
            let parts = member.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces).lowercased() == "sha-256" else {
                continue
            }
            let item = parts[1].trimmingCharacters(in: .whitespaces)
            guard item.count >= 2, item.hasPrefix(":"), item.hasSuffix(":"),
                let bytes = Data(base64Encoded: String(item.dropFirst().dropLast())), bytes.count == 32
            else {
                throw FerryError(
                    .corruptTransfer,
                    "the server sent a malformed Repr-Digest '\(value.prefix(120))'; check the server or proxy",
                    key: "Repr-Digest")
            }
            return bytes.map { String(format: "%02x", $0) }.joined()
        }
        return nil
    }

    /// `bytes a-b/total` → (a, b, total). `bytes */total` and anything malformed are nil.
    static func contentRange(_ value: String?) -> (start: Int64, end: Int64, total: Int64)? {
        guard let value else { return nil }
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        guard trimmed.hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst("bytes ".count)
        let slash = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard slash.count == 2, let total = nonNegative(slash[1]) else { return nil }
        let dash = slash[0].split(separator: "-", omittingEmptySubsequences: false)
        guard dash.count == 2, let start = nonNegative(dash[0]), let end = nonNegative(dash[1]), start <= end,
            end < total
        else { return nil }
        return (start, end, total)
    }

    /// A non-negative decimal integer header value (Content-Length, Ferry-Version), else nil.
    static func nonNegative(_ value: (some StringProtocol)?) -> Int64? {
        guard let value else { return nil }
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty, trimmed.utf8.count <= 18, trimmed.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else {
            return nil
        }
        return Int64(trimmed)
    }
}
