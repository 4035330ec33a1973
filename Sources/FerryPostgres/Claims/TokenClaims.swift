import FerryCore
import Foundation

/// A JSON value of a token's header or claims, objects and arrays included (``ClaimPath`` walks them).
public enum ClaimValue: Codable, Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([ClaimValue])
    case object([String: ClaimValue])

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        // Each attempt below asks "is it this JSON shape?"; a scalar is decoded as the change values' `JSONValue`.
        if let items = try? c.decode([ClaimValue].self) {  // not an array: the next shape is tried
            self = .array(items)
        } else if let fields = try? c.decode([String: ClaimValue].self) {  // not an object: a scalar, decoded below
            self = .object(fields)
        } else {
            switch try c.decode(JSONValue.self) {
            case .null: self = .null
            case .bool(let b): self = .bool(b)
            case .int(let i): self = .int(i)
            case .double(let d): self = .double(d)
            case .string(let s): self = .string(s)
            }
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encode(JSONValue.null)
        case .bool(let b): try c.encode(JSONValue.bool(b))
        case .int(let i): try c.encode(JSONValue.int(i))
        case .double(let d): try c.encode(JSONValue.double(d))
        case .string(let s): try c.encode(JSONValue.string(s))
        case .array(let items): try c.encode(items)
        case .object(let fields): try c.encode(fields)
        }
    }

    /// The member `name` of an object; nil for anything else.
    public subscript(name: String) -> ClaimValue? {
        if case .object(let members) = self { return members[name] }
        return nil
    }

    /// A string member's text; nil when absent or not a string.
    public func string(_ name: String) -> String? {
        if case .string(let text)? = self[name] { return text }
        return nil
    }

    /// A NumericDate member (RFC 7519 §2: seconds since the epoch, maybe fractional); nil when absent or not a number.
    public func date(_ name: String) -> Date? {
        switch self[name] {
        case .int(let seconds)?: Date(timeIntervalSince1970: Double(seconds))
        case .double(let seconds)? where seconds.isFinite: Date(timeIntervalSince1970: seconds)
        default: nil
        }
    }

    /// A string member, or each string of an array member (as `aud` may be either); empty otherwise.
    public func strings(_ name: String) -> [String] {
        switch self[name] {
        case .string(let text)?: [text]
        case .array(let items)?: items.compactMap { if case .string(let text) = $0 { text } else { nil } }
        default: []
        }
    }
}

/// A path to a claim: `team`, or `realm_access.team` for a member of an object claim.
///
/// ```swift
/// let path = try ClaimPath("realm_access.team")
/// path.scopeValue(in: claims)  // .value("7") for {"realm_access": {"team": 7}}
/// ```
public struct ClaimPath: Sendable, Hashable, CustomStringConvertible {
    /// The member names, outermost first.
    public let components: [String]

    /// Parses a dotted path; nil when a component is empty (`a..b`, `.a`) or the text is empty.
    public init?(_ text: String) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard !text.isEmpty, text.utf8.count <= 256, parts.allSatisfy({ !$0.isEmpty }) else { return nil }
        components = parts
    }

    public var description: String { components.joined(separator: ".") }

    /// What a claim gives as a scope value.
    public enum Outcome: Sendable, Equatable {
        /// The scope value in its text form (integers as decimal).
        case value(String)
        /// The token has no such claim.
        case missing
        /// The claim is there but not a string or an integer (its JSON type is named).
        case notScalar(String)
    }

    /// The scope value this path names in `claims`: a string as is, an integer (or an integral number) in decimal.
    public func scopeValue(in claims: ClaimValue) -> Outcome {
        var node = claims
        for name in components {
            guard let next = node[name] else { return .missing }
            node = next
        }
        switch node {
        case .string(let text): return .value(text)
        case .int(let number): return .value(String(number))
        case .double(let number) where number.rounded() == number && abs(number) < 9e15:
            return .value(String(Int64(number)))
        case .null: return .missing
        case .bool: return .notScalar("a boolean")
        case .double: return .notScalar("a fractional number")
        case .array: return .notScalar("an array")
        case .object: return .notScalar("an object")
        }
    }
}

/// A JWT's header and claims decoded without checking anything: what `ferry token inspect` prints, and what the
/// server reads (`alg`, `kid`) before it verifies the signature.
///
/// ```swift
/// let jwt = try UnverifiedJWT(token)
/// jwt.header.string("alg")  // "RS256"
/// ```
public struct UnverifiedJWT: Sendable {
    /// The decoded JOSE header.
    public let header: ClaimValue
    /// The decoded claims (the payload).
    public let claims: ClaimValue
    /// The header and payload exactly as sent, as JSON text (for printing).
    public let headerJSON: Data
    public let claimsJSON: Data

    /// Decodes `token` (three base64url parts joined by dots, the header and claims JSON objects). Throws
    /// `badInput` naming the part that is wrong.
    public init(_ token: String) throws {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw FerryError(
                .badInput,
                "a JWT has three parts separated by dots (header.claims.signature); this token has \(parts.count)")
        }
        guard let header = Self.base64URLDecode(parts[0]), let claims = Self.base64URLDecode(parts[1]) else {
            throw FerryError(.badInput, "the token's header or claims are not base64url")
        }
        let decoder = JSONDecoder()
        // Not JSON: the malformed-token error below says so.
        guard let headerValue = try? decoder.decode(ClaimValue.self, from: header), case .object = headerValue else {
            throw FerryError(.badInput, "the token's header is not a JSON object")
        }
        // As above.
        guard let claimsValue = try? decoder.decode(ClaimValue.self, from: claims), case .object = claimsValue else {
            throw FerryError(.badInput, "the token's claims are not a JSON object")
        }
        self.header = headerValue
        self.claims = claimsValue
        self.headerJSON = header
        self.claimsJSON = claims
    }

    /// Whether `token` looks like a JWT (three dot-separated parts whose first is a JSON object): how a server with
    /// both kinds of datasets, or the CLI, tells a JWT from an opaque token.
    public static func looksLikeJWT(_ token: String) -> Bool {
        // Any parse failure means: not a JWT.
        (try? UnverifiedJWT(token)) != nil
    }

    /// RFC 4648 §5 base64url, padding optional; nil for any other byte.
    public static func base64URLDecode(_ text: Substring) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        guard !base64.contains("=") || text.hasSuffix("=") else { return nil }
        base64 = base64.trimmingCharacters(in: CharacterSet(charactersIn: "="))
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }
}
