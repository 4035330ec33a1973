import Foundation

/// The one place SQL identifiers are checked and quoted, for PostgreSQL and SQLite alike. Table and column names
/// come only from the template, the PostgreSQL catalog or a verified snapshot's own schema, and always pass through
/// here before they reach SQL text; values are always bound. ``literal(_:)`` is for the few constant strings that
/// SQL text must carry (trigger messages, JSON keys in generated SQL), never for a value from a request.
///
/// ```swift
/// SQLIdentifier.quote("createdAt")              // "\"createdAt\""
/// SQLIdentifier.quoteQualified("public.trips")  // "\"public\".\"trips\""
/// SQLIdentifier.literal("it's")                 // "'it''s'"
/// ```
public enum SQLIdentifier {
    /// True for `[A-Za-z_][A-Za-z0-9_]*`: the names a template may give SQLite tables.
    public static func isPlain(_ name: String) -> Bool {
        guard let first = name.utf8.first, name.utf8.count <= 63 else { return false }
        guard isLetter(first) || first == UInt8(ascii: "_") else { return false }
        return name.utf8.allSatisfy { isLetter($0) || isDigit($0) || $0 == UInt8(ascii: "_") }
    }

    /// True for a PostgreSQL relation name `table` or `schema.table` made of plain identifiers (`$` allowed).
    public static func isQualified(_ name: String) -> Bool {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count) else { return false }
        return parts.allSatisfy { part in
            guard let first = part.utf8.first, part.utf8.count <= 63, isLetter(first) || first == UInt8(ascii: "_")
            else { return false }
            return part.utf8.allSatisfy {
                isLetter($0) || isDigit($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "$")
            }
        }
    }

    /// True when a column name can be quoted safely: non-empty, at most 63 bytes, no control characters.
    public static func isQuotable(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 63 && name.utf8.allSatisfy { $0 >= 0x20 && $0 != 0x7f }
    }

    /// Double-quotes an identifier, doubling embedded quotes (valid in both PostgreSQL and SQLite).
    public static func quote(_ name: String) -> String {
        precondition(isQuotable(name), "identifier must be checked with isQuotable before quoting")
        return "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// Double-quotes a name Ferry derives for SQLite alone, such as a trigger name made from a table name. SQLite
    /// takes longer names than PostgreSQL's 63 bytes, so only control characters are refused.
    ///
    /// ```swift
    /// SQLIdentifier.quoteSQLite("ferry_trips_ins")  // "\"ferry_trips_ins\""
    /// ```
    public static func quoteSQLite(_ name: String) -> String {
        precondition(
            !name.isEmpty && name.utf8.allSatisfy { $0 >= 0x20 && $0 != 0x7f },
            "a derived SQLite name has no control characters")
        return "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// Quotes each part of `schema.table`.
    public static func quoteQualified(_ name: String) -> String {
        name.split(separator: ".").map { quote(String($0)) }.joined(separator: ".")
    }

    /// A SQL string literal: single-quoted, embedded quotes doubled (valid in both PostgreSQL and SQLite).
    public static func literal(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
    }

    @inline(__always) static func isLetter(_ c: UInt8) -> Bool { (c >= 65 && c <= 90) || (c >= 97 && c <= 122) }
    @inline(__always) static func isDigit(_ c: UInt8) -> Bool { c >= 48 && c <= 57 }
}
