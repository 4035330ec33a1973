/// Validates dataset names: `[a-z0-9_-]+`, at most 64 characters. They appear in URLs and file names, so nothing
/// else is ever accepted (no dots, no slashes: a name can never escape the store).
///
/// ```swift
/// try DatasetName.validate("campgrounds")   // ok
/// DatasetName.isValid("../etc")             // false
/// ```
public enum DatasetName {
    public static func isValid(_ name: String) -> Bool {
        guard !name.isEmpty, name.utf8.count <= 64 else { return false }
        return name.utf8.allSatisfy { c in
            (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9"))
                || c == UInt8(ascii: "_") || c == UInt8(ascii: "-")
        }
    }

    public static func validate(_ name: String, path: String? = nil, key: String? = "dataset") throws {
        guard isValid(name) else {
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
