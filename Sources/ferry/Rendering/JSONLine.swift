import Foundation

/// Renders an `Encodable` as the one line of JSON a `--json` flag prints, keys in the order its `encode(to:)`
/// writes them.
///
/// swift-foundation's `JSONEncoder` keeps an object's members in a hash table, so without `.sortedKeys` their order
/// changes from run to run, and `.sortedKeys` would reorder the documented contract (`state` first). So the top-level
/// object is laid out here, member by member in `encode(to:)` order, and every value (strings with their escapes,
/// numbers, arrays, nested objects with sorted keys) is encoded by `JSONEncoder`. `--json` output only ever adds
/// fields: a new field goes at the end of `encode(to:)`, and the golden tests pin the rest.
///
/// ```swift
/// print(try JSONLine.render(StatusJSON(status)))
/// // {"state":"upToDate","version":3,"sha256":"…","pendingVersion":null,"pendingSha256":null,"outbox":0}
/// ```
enum JSONLine {
    static func render(_ value: some Encodable) throws -> String {
        let members = Members()
        try value.encode(to: MemberEncoder(members: members))
        let pairs = try members.list.map { key, json in "\(try fragment(key)):\(json)" }
        return "{" + pairs.joined(separator: ",") + "}"
    }

    /// `value` encoded on its own (a string, number, array, or an object with sorted keys).
    static func fragment(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // SQLite can hold ±Infinity in a REAL column; JSON has no number for it.
        encoder.nonConformingFloatEncodingStrategy = .convertToString(
            positiveInfinity: "Infinity", negativeInfinity: "-Infinity", nan: "NaN")
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    /// The members written so far, in order.
    private final class Members {
        var list: [(key: String, json: String)] = []
    }

    /// An `Encoder` for one flat object: each `encode(_:forKey:)` becomes a member, in call order.
    private struct MemberEncoder: Encoder {
        let members: Members
        var codingPath: [any CodingKey] { [] }
        var userInfo: [CodingUserInfoKey: Any] { [:] }

        func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
            KeyedEncodingContainer(MemberContainer<Key>(members: members))
        }

        // `--json` output is always an object; its values go through `encode(_:forKey:)`.
        func unkeyedContainer() -> any UnkeyedEncodingContainer {
            preconditionFailure("JSONLine renders objects only: encode(to:) must use a keyed container")
        }

        func singleValueContainer() -> any SingleValueEncodingContainer {
            preconditionFailure("JSONLine renders objects only: encode(to:) must use a keyed container")
        }
    }

    private struct MemberContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
        let members: Members
        var codingPath: [any CodingKey] { [] }

        mutating func encodeNil(forKey key: Key) throws {
            members.list.append((key.stringValue, "null"))
        }

        mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
            members.list.append((key.stringValue, try JSONLine.fragment(value)))
        }

        // A nested value is encoded whole by `encode(_:forKey:)`; nested containers are never needed.
        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
            -> KeyedEncodingContainer<NestedKey>
        {
            preconditionFailure("JSONLine: encode nested values with encode(_:forKey:)")
        }

        mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
            preconditionFailure("JSONLine: encode nested values with encode(_:forKey:)")
        }

        mutating func superEncoder() -> any Encoder {
            preconditionFailure("JSONLine: encode nested values with encode(_:forKey:)")
        }

        mutating func superEncoder(forKey key: Key) -> any Encoder {
            preconditionFailure("JSONLine: encode nested values with encode(_:forKey:)")
        }
    }
}
