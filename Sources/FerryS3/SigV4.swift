import Crypto
import Foundation

/// AWS credentials for signing. `description` shows the access key id only; the secret and the session token are
/// never printed.
///
/// ```swift
/// let credentials = S3Credentials(accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalr…")
/// ```
public struct S3Credentials: Sendable, Equatable, CustomStringConvertible {
    public var accessKeyID: String
    public var secretAccessKey: String
    /// A temporary credential's token (`AWS_SESSION_TOKEN`), sent as `x-amz-security-token`.
    public var sessionToken: String?

    public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
    }

    public var description: String {
        "S3Credentials(accessKeyID: \(accessKeyID), secretAccessKey: ***\(sessionToken == nil ? "" : ", sessionToken: ***"))"
    }
}

/// What a request's `x-amz-content-sha256` says about its body.
public enum PayloadHash: Sendable, Equatable {
    /// The SHA-256 of the body, lowercase hex.
    case sha256(String)
    /// `UNSIGNED-PAYLOAD`: the body is not part of the signature.
    case unsigned
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: an aws-chunked body whose checksum comes in a trailer.
    case streamingUnsignedTrailer

    /// The hash of `bytes`.
    ///
    /// ```swift
    /// PayloadHash.of(Data()).value // "e3b0c442…b855"
    /// ```
    public static func of(_ bytes: some DataProtocol) -> PayloadHash { .sha256(SigV4.hex(SHA256.hash(data: bytes))) }

    /// The header's value.
    public var value: String {
        switch self {
        case .sha256(let hex): hex
        case .unsigned: "UNSIGNED-PAYLOAD"
        case .streamingUnsignedTrailer: "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
        }
    }
}

/// AWS Signature Version 4 for S3 (docs: "Authenticating Requests (AWS Signature Version 4)"), on swift-crypto's
/// HMAC<SHA256>. Checked against botocore's signer by scripts/lib/sigv4_check.py.
///
/// Paths and query items are given decoded; the signer encodes them with S3's rules (``encodePath(_:)``,
/// ``encodeQuery(_:)``), and the request must be sent with the same encoding.
///
/// ```swift
/// let signer = SigV4(credentials: credentials, region: "us-east-1")
/// let added = signer.sign(method: "GET", path: "/bucket/a key", query: [], headers: [("host", "s3.example")],
///                         payload: .of(Data()), date: Date())
/// // added: x-amz-date, x-amz-content-sha256, [x-amz-security-token], authorization
/// ```
public struct SigV4: Sendable {
    public var credentials: S3Credentials
    public var region: String
    public var service: String

    public init(credentials: S3Credentials, region: String, service: String = "s3") {
        self.credentials = credentials
        self.region = region
        self.service = service
    }

    /// The headers to add to a request (names lowercase): `x-amz-date`, `x-amz-content-sha256`,
    /// `x-amz-security-token` when there is a session token, and `authorization`. Every header in `headers`
    /// (which must include `host`) is signed.
    public func sign(
        method: String, path: String, query: [(String, String)], headers: [(String, String)], payload: PayloadHash,
        date: Date
    ) -> [(String, String)] {
        let stamp = Self.timestamp(date)
        var added: [(String, String)] = [("x-amz-date", stamp), ("x-amz-content-sha256", payload.value)]
        if let token = credentials.sessionToken { added.append(("x-amz-security-token", token)) }
        let drop = Set(added.map(\.0))
        let signed = headers.filter { !drop.contains($0.0.lowercased()) } + added
        let (canonicalHeaders, signedNames) = Self.canonicalHeaders(signed)
        let canonical = [
            method.uppercased(), Self.encodePath(path), Self.canonicalQuery(query), canonicalHeaders, signedNames,
            payload.value,
        ].joined(separator: "\n")
        let scope = self.scope(stamp)
        let signature = self.signature(canonicalRequest: canonical, timestamp: stamp, scope: scope)
        added.append(
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyID)/\(scope), SignedHeaders=\(signedNames), "
                    + "Signature=\(signature)"
            ))
        return added
    }

    /// A presigned URL's query items (query-string authentication): `query` followed by the `X-Amz-*` items, the
    /// signature last. Only `host` is signed and the payload is `UNSIGNED-PAYLOAD`.
    ///
    /// ```swift
    /// let items = signer.presign(method: "GET", path: "/bucket/key", query: [], host: "s3.example",
    ///                            expires: 900, date: Date())
    /// ```
    public func presign(
        method: String, path: String, query: [(String, String)], host: String, expires: Int, date: Date
    ) -> [(String, String)] {
        let stamp = Self.timestamp(date)
        let scope = self.scope(stamp)
        var items =
            query + [
                ("X-Amz-Algorithm", "AWS4-HMAC-SHA256"), ("X-Amz-Credential", "\(credentials.accessKeyID)/\(scope)"),
                ("X-Amz-Date", stamp), ("X-Amz-Expires", String(expires)), ("X-Amz-SignedHeaders", "host"),
            ]
        if let token = credentials.sessionToken { items.append(("X-Amz-Security-Token", token)) }
        let canonical = [
            method.uppercased(), Self.encodePath(path), Self.canonicalQuery(items), "host:\(Self.trimAll(host))\n",
            "host", PayloadHash.unsigned.value,
        ].joined(separator: "\n")
        items.append(("X-Amz-Signature", signature(canonicalRequest: canonical, timestamp: stamp, scope: scope)))
        return items
    }

    func scope(_ stamp: String) -> String { "\(stamp.prefix(8))/\(region)/\(service)/aws4_request" }

    func signature(canonicalRequest: String, timestamp: String, scope: String) -> String {
        let stringToSign = [
            "AWS4-HMAC-SHA256", timestamp, scope, Self.hex(SHA256.hash(data: Data(canonicalRequest.utf8))),
        ].joined(separator: "\n")
        var key = SymmetricKey(data: Data("AWS4\(credentials.secretAccessKey)".utf8))
        for part in [String(timestamp.prefix(8)), region, service, "aws4_request"] {
            key = SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(part.utf8), using: key)))
        }
        return Self.hex(HMAC<SHA256>.authenticationCode(for: Data(stringToSign.utf8), using: key))
    }

    /// `20130524T000000Z`: the request time in UTC.
    public static func timestamp(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        func two(_ value: Int?) -> String { value.map { $0 < 10 ? "0\($0)" : "\($0)" } ?? "00" }
        return "\(c.year ?? 1970)\(two(c.month))\(two(c.day))T\(two(c.hour))\(two(c.minute))\(two(c.second))Z"
    }

    /// S3's URI encoding of one string: the unreserved `A-Za-z0-9-._~` kept, every other UTF-8 byte as `%XX`
    /// (uppercase); `/` too, unless `keepSlash`.
    public static func uriEncode(_ string: String, keepSlash: Bool = false) -> String {
        var out = ""
        out.reserveCapacity(string.utf8.count)
        let digits = Array("0123456789ABCDEF")
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                out.append(Character(Unicode.Scalar(byte)))
            case UInt8(ascii: "/") where keepSlash:
                out.append("/")
            default:
                out.append("%")
                out.append(digits[Int(byte >> 4)])
                out.append(digits[Int(byte & 0xF)])
            }
        }
        return out
    }

    /// A decoded path (`/bucket/a key`) as it is signed and sent: each segment encoded once (S3 does not encode
    /// twice, nor remove `.` or `//`).
    public static func encodePath(_ path: String) -> String {
        let encoded = uriEncode(path, keepSlash: true)
        return encoded.hasPrefix("/") ? encoded : "/" + encoded
    }

    /// Decoded query items as sent: `key=value` pairs, each side encoded, in the given order.
    public static func encodeQuery(_ items: [(String, String)]) -> String {
        items.map { "\(uriEncode($0.0))=\(uriEncode($0.1))" }.joined(separator: "&")
    }

    /// The canonical query string: items encoded, sorted by encoded key then encoded value (byte order), an empty
    /// value as `key=`.
    static func canonicalQuery(_ items: [(String, String)]) -> String {
        items.map { (uriEncode($0.0), uriEncode($0.1)) }
            .sorted {
                $0.0 == $1.0
                    ? $0.1.utf8.lexicographicallyPrecedes($1.1.utf8) : $0.0.utf8.lexicographicallyPrecedes($1.0.utf8)
            }
            .map { "\($0.0)=\($0.1)" }.joined(separator: "&")
    }

    /// The canonical headers block (each `name:value\n`, names lowercase and sorted, values trimmed with inner
    /// whitespace collapsed, repeated names joined with `,`) and the signed header names.
    static func canonicalHeaders(_ headers: [(String, String)]) -> (String, String) {
        var byName: [String: [String]] = [:]
        for (name, value) in headers {
            byName[name.lowercased().trimmingCharacters(in: .whitespaces), default: []].append(trimAll(value))
        }
        let names = byName.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let block = names.map { "\($0):\(byName[$0]!.joined(separator: ","))\n" }.joined()
        return (block, names.joined(separator: ";"))
    }

    /// Trimall: whitespace removed at both ends, each inner run of whitespace made one space.
    static func trimAll(_ value: String) -> String {
        value.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }).joined(separator: " ")
    }

    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef")
        var out = ""
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0xF)])
        }
        return out
    }
}
