/// A `Range: bytes=...` header (RFC 9110 §14.1.2), resolved against a representation's size.
///
/// Only a single range is served as 206; several ranges are answered with the full body (allowed by §14.2),
/// a syntactically invalid header or another unit is ignored (full body), and a header whose every range is
/// unsatisfiable gives 416.
enum ByteRangeRequest: Equatable {
    /// Serve the whole representation with 200.
    case ignore
    /// Serve bytes `start...end` (inclusive, already clamped) with 206.
    case single(start: Int64, end: Int64)
    /// 416 with `Content-Range: bytes */size`.
    case unsatisfiable

    /// Resolves `header` for a representation of `size` bytes.
    static func resolve(_ header: Substring, size: Int64) -> ByteRangeRequest {
        var text = header[...]
        trimSpaces(&text)
        guard text.count >= 6, text.prefix(6).lowercased() == "bytes=" else { return .ignore }
        text = text.dropFirst(6)
        var specs: [Spec] = []
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            var piece = part
            trimSpaces(&piece)
            if piece.isEmpty { continue }  // #rule allows empty list elements
            guard let spec = Spec(piece) else { return .ignore }
            specs.append(spec)
        }
        guard !specs.isEmpty else { return .ignore }
        let satisfiable = specs.compactMap { $0.clamped(size: size) }
        if satisfiable.isEmpty { return .unsatisfiable }
        if specs.count > 1 { return .ignore }
        return .single(start: satisfiable[0].start, end: satisfiable[0].end)
    }

    /// One range-spec: `first-last`, `first-` or `-suffix`.
    private struct Spec {
        var first: Int64?
        var last: Int64?

        init?(_ text: Substring) {
            guard let dash = text.firstIndex(of: "-") else { return nil }
            let head = text[..<dash]
            let tail = text[text.index(after: dash)...]
            if head.isEmpty {
                guard let suffix = Self.number(tail) else { return nil }
                first = nil
                last = suffix
            } else {
                guard let start = Self.number(head) else { return nil }
                first = start
                if tail.isEmpty {
                    last = nil
                } else {
                    guard let end = Self.number(tail), end >= start else { return nil }
                    last = end
                }
            }
        }

        /// 1*DIGIT; values too large for Int64 saturate (they are beyond any file anyway).
        static func number(_ text: Substring) -> Int64? {
            guard !text.isEmpty else { return nil }
            var value: Int64 = 0
            for byte in text.utf8 {
                guard byte >= 48, byte <= 57 else { return nil }
                let (times, overflow1) = value.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times.addingReportingOverflow(Int64(byte - 48))
                value = overflow1 || overflow2 ? Int64.max : sum
            }
            return value
        }

        /// The satisfiable byte interval, or nil (§14.1.1: first-pos ≥ size, or a zero suffix).
        func clamped(size: Int64) -> (start: Int64, end: Int64)? {
            if let first {
                guard first < size else { return nil }
                return (first, min(last ?? Int64.max, size - 1))
            }
            guard let suffix = last, suffix > 0, size > 0 else { return nil }
            return (max(0, size - suffix), size - 1)
        }
    }
}

func trimSpaces(_ text: inout Substring) {
    while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
    while let last = text.last, last == " " || last == "\t" { text.removeLast() }
}
