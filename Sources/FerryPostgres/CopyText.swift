/// Rows in the text format of `COPY … FROM STDIN`, built as bytes for ``PostgresConnection/copyIn(_:_:)``: fields
/// separated by tabs, rows ended by newlines, `\N` for NULL, and backslash, tab, newline and carriage return
/// escaped.
///
/// ```swift
/// var rows = CopyText()
/// rows.field("id-1"); rows.field(nil); rows.endRow()
/// _ = try pg.copyIn("COPY notes(id, body) FROM STDIN", rows.bytes)
/// ```
package struct CopyText: Sendable {
    /// The rows written so far.
    package private(set) var bytes: [UInt8] = []
    private var rowStarted = false

    package init(capacity: Int = 0) { bytes.reserveCapacity(capacity) }

    /// Appends one field holding `text` (nil: NULL).
    package mutating func field(_ text: String?) {
        guard var text else {
            separate()
            bytes.append(contentsOf: #"\N"#.utf8)
            return
        }
        text.withUTF8 { field(utf8: $0) }
    }

    /// Appends one field holding the UTF-8 text `utf8`.
    package mutating func field(_ utf8: [UInt8]) {
        utf8.withUnsafeBufferPointer { field(utf8: $0) }
    }

    // Not generic: a generic field would run unspecialised from another module, element by element.
    private mutating func field(utf8: UnsafeBufferPointer<UInt8>) {
        separate()
        let backslash = UInt8(ascii: "\\")
        guard utf8.contains(where: { $0 == backslash || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }) else {
            bytes.append(contentsOf: utf8)
            return
        }
        for byte in utf8 {
            switch byte {
            case backslash: bytes.append(contentsOf: [backslash, backslash])
            case 0x09: bytes.append(contentsOf: [backslash, UInt8(ascii: "t")])
            case 0x0A: bytes.append(contentsOf: [backslash, UInt8(ascii: "n")])
            case 0x0D: bytes.append(contentsOf: [backslash, UInt8(ascii: "r")])
            default: bytes.append(byte)
            }
        }
    }

    /// Ends the current row.
    package mutating func endRow() {
        bytes.append(0x0A)
        rowStarted = false
    }

    private mutating func separate() {
        if rowStarted { bytes.append(0x09) }
        rowStarted = true
    }
}
