import FerryClient
import FerryCore

/// `ferry rejected list --json`: every kept edit, oldest answer first.
///
/// ```json
/// {"edits":[{"id":"…","table":"findings","operation":"update","key":{"id":"…"},"values":{"severity":"high"},
///   "outcome":"merged","serverValues":{…},"lostColumns":["severity"],"rule":"newest-wins","reason":"…",
///   "editedAt":"…","answeredAt":"…"}]}
/// ```
struct RejectedJSON: Encodable {
    let edits: [RejectedEdit]

    enum CodingKeys: String, CodingKey { case edits }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(edits, forKey: .edits)
    }
}

/// `ferry rejected resubmit --json`: `{"resubmitted":ID,"change":NEW_ID}`.
struct ResubmitJSON: Encodable {
    let resubmitted: String
    let change: String

    enum CodingKeys: String, CodingKey { case resubmitted, change }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(resubmitted, forKey: .resubmitted)
        try container.encode(change, forKey: .change)
    }
}

/// `ferry rejected discard --json`: `{"discarded":ID}`.
struct DiscardJSON: Encodable {
    let discarded: String
}

extension RejectedEdit {
    /// One line for a person: id, outcome, table and key, the lost columns with the local and the server's values.
    var text: String {
        get throws {
            let key = try JSONLine.fragment(self.key)
            let lost = lostColumns.map { column in
                // A value that cannot be written as JSON shows as "?": this line is for a person, not a parser.
                let mine = values[column].map { (try? JSONLine.fragment($0)) ?? "?" } ?? "–"
                // as above
                let server = serverValues?[column].map { (try? JSONLine.fragment($0)) ?? "?" } ?? "–"
                return "\(column): yours \(mine), server \(server)"
            }
            var line = "\(id)\t\(outcome.rawValue)\t\(table) \(key)\t\(operation.rawValue)"
            if !lost.isEmpty { line += "\t" + lost.joined(separator: "; ") }
            return line
        }
    }
}
