import ArgumentParser
import Foundation

/// A size flag's value: a byte count, or a number with a binary unit `K`, `M`, `G` or `T` (`512M`, `4G`; an
/// optional `B` or `iB` after it), at least 1 MiB.
///
/// ```swift
/// @Option(transform: ByteSize.argument) var cacheSize: Int64 = 4 << 30
/// ```
enum ByteSize {
    static let argument: @Sendable (String) throws -> Int64 = { text in
        let invalid = ValidationError(
            "must be a size such as 4G, 512M or a byte count of at least 1048576, got '\(text.prefix(40))'")
        var digits = Substring(text.trimmingCharacters(in: .whitespaces).uppercased())
        for suffix in ["IB", "B"] where digits.hasSuffix(suffix) && digits.count > suffix.count {
            digits = digits.dropLast(suffix.count)
            break
        }
        var shift: Int64 = 0
        if let unit = digits.last, let index = "KMGT".firstIndex(of: unit) {
            shift = Int64("KMGT".distance(from: "KMGT".startIndex, to: index) + 1) * 10
            digits = digits.dropLast()
        }
        guard let number = Int64(digits), number >= 0, number <= Int64.max >> shift else { throw invalid }
        let bytes = number << shift
        guard bytes >= 1 << 20 else { throw invalid }
        return bytes
    }
}
