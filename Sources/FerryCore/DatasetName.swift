/// Validates dataset names. A template's dataset is a base name, `[a-z0-9_-]+` of at most 64 characters. A dataset
/// published in several schema lines (docs/schema-lines.md) stores each line as `BASE.vN`, N being the line's schema
/// version (a positive decimal without leading zeros, at most 9 digits). Both appear in URLs and file names, so
/// nothing else is ever accepted: no slash, and a dot only before the `v` of a line, so `..` can never be one.
///
/// ```swift
/// try DatasetName.validate("campgrounds")   // ok
/// DatasetName.isValid("trips.v2")           // true: schema line 2 of trips
/// DatasetName.isValidBase("trips.v2")       // false: a template or a client names the dataset itself
/// DatasetName.isValid("../etc")             // false
/// ```
public enum DatasetName {
    /// A base name or a line name.
    public static func isValid(_ name: String) -> Bool {
        split(name) != nil
    }

    /// A base name only: what a template's `dataset:` and a client's configuration name.
    public static func isValidBase(_ name: String) -> Bool {
        guard !name.isEmpty, name.utf8.count <= 64 else { return false }
        return name.utf8.allSatisfy { c in
            (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9"))
                || c == UInt8(ascii: "_") || c == UInt8(ascii: "-")
        }
    }

    /// The store name of schema line `schemaVersion` of `base`: `trips` and 2 make `trips.v2`.
    public static func line(base: String, schemaVersion: Int) -> String {
        "\(base).v\(schemaVersion)"
    }

    /// A valid name's base and, for a line, its schema version; nil for an invalid name.
    public static func split(_ name: String) -> (base: String, schemaVersion: Int?)? {
        guard let dot = name.utf8.lastIndex(of: UInt8(ascii: ".")) else {
            return isValidBase(name) ? (name, nil) : nil
        }
        let base = String(name[..<dot])
        let suffix = name.utf8[name.utf8.index(after: dot)...]
        guard isValidBase(base), suffix.first == UInt8(ascii: "v") else { return nil }
        let digits = suffix.dropFirst()
        guard (1...9).contains(digits.count), digits.first != UInt8(ascii: "0"),
            digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            let number = Int(String(decoding: digits, as: UTF8.self))
        else { return nil }
        return (base, number)
    }

    /// The base of a valid name (`trips.v2` → `trips`), nil for an invalid one.
    public static func base(of name: String) -> String? {
        split(name)?.base
    }

    public static func validate(_ name: String, path: String? = nil, key: String? = "dataset") throws {
        guard isValid(name) else {
            throw FerryError(
                .badInput,
                "dataset name '\(name)' is invalid: use 1-64 characters from a-z, 0-9, '_' and '-' (a schema line adds .vN)",
                path: path, key: key)
        }
    }

    /// Like ``validate(_:path:key:)`` for a base name (a template's `dataset:`, a client's dataset).
    public static func validateBase(_ name: String, path: String? = nil, key: String? = "dataset") throws {
        guard isValidBase(name) else {
            throw FerryError(
                .badInput, "dataset name '\(name)' is invalid: use 1-64 characters from a-z, 0-9, '_' and '-'",
                path: path, key: key)
        }
    }
}

/// Validates SHA-256 hex strings (64 lowercase hex digits), as used for checksums and ETags.
public enum SHA256Hex {
    public static func isValid(_ text: some StringProtocol) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
    }
}
