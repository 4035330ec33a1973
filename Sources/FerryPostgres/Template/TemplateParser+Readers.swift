import FerryCore
import Yams

/// Typed readers of YAML nodes, and the hints of the parser's messages.
extension TemplateParser {
    /// A mapping with string keys, rejecting keys not in `allowed` with a "did you mean" hint.
    func mapping(_ node: Node, key: String?, allowed: [String]) throws -> [String: Node] {
        guard case .mapping(let mapping) = node else {
            throw fail(
                key, "\(key.map { "`\($0)`" } ?? "the template") must be a mapping of `key: value` lines", at: node)
        }
        var out: [String: Node] = [:]
        for (k, v) in mapping {
            guard let name = k.scalar?.string else { throw fail(key, "keys must be plain words", at: k) }
            let full = key.map { "\($0).\(name)" } ?? name
            guard allowed.contains(name) else {
                var message = "unknown key `\(name)`"
                if let guess = Self.suggestion(for: name, among: allowed) { message += "; did you mean `\(guess)`?" }
                message += " Allowed here: \(allowed.joined(separator: ", "))"
                throw fail(full, message, at: k)
            }
            guard out[name] == nil else { throw fail(full, "key `\(name)` appears twice: keep one", at: k) }
            out[name] = v
        }
        return out
    }

    func string(_ node: Node, key: String) throws -> String {
        guard let scalar = node.scalar, !(scalar.style == .plain && scalar.string.isEmpty) else {
            throw fail(key, "`\(key)` must be a text value", at: node)
        }
        if scalar.style == .plain, ["~", "null", "Null", "NULL"].contains(scalar.string) {
            throw fail(key, "`\(key)` must be a text value, not null", at: node)
        }
        return scalar.string
    }

    func column(_ node: Node, key: String) throws -> String {
        let name = try string(node, key: key)
        guard SQLIdentifier.isQuotable(name) else {
            throw fail(key, "'\(name)' is not a column name: 1-63 bytes, no control characters", at: node)
        }
        return name
    }

    /// A list of strings; a single scalar counts as a one-item list.
    func stringList(_ node: Node, key: String) throws -> [String] {
        try list(node, key: key, of: "a list, e.g. `[a, b]`", item: string)
    }

    /// A list of column names; a single scalar counts as a one-item list.
    func columnList(_ node: Node, key: String) throws -> [String] {
        try list(node, key: key, of: "a list of column names, e.g. `[id]`", item: column)
    }

    /// A list of `item`s keyed `key[i]`, or a single scalar as a one-item list; anything else must be `what`.
    private func list(_ node: Node, key: String, of what: String, item: (Node, String) throws -> String) throws
        -> [String]
    {
        switch node {
        case .scalar: return [try item(node, key)]
        case .sequence(let items):
            return try items.enumerated().map { try item($0.element, "\(key)[\($0.offset)]") }
        default: throw fail(key, "`\(key)` must be \(what)", at: node)
        }
    }

    // MARK: - Hints

    /// The allowed key closest to `word` (edit distance ≤ 3 or a case-only difference), if any.
    static func suggestion(for word: String, among candidates: [String]) -> String? {
        if let same = candidates.first(where: { $0.lowercased() == word.lowercased() }) { return same }
        let scored = candidates.map { ($0, editDistance(word.lowercased(), $0.lowercased())) }
        guard let best = scored.min(by: { $0.1 < $1.1 }), best.1 <= max(1, min(3, word.count / 2)) else { return nil }
        return best.0
    }

    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8)
        let b = Array(b.utf8)
        var previous = Array(0...b.count)
        for i in 1...max(a.count, 1) where !a.isEmpty {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...max(b.count, 1) where !b.isEmpty {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return a.isEmpty ? b.count : previous[b.count]
    }

    static func describe(_ error: YamlError) -> String {
        switch error {
        case .scanner(_, let problem, let mark, _), .parser(_, let problem, let mark, _),
            .composer(_, let problem, let mark, _):
            return "\(problem) at line \(mark.line), column \(mark.column)"
        default:
            return "\(error)"
        }
    }
}
