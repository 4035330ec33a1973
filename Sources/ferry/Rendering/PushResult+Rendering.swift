import FerryClient

/// `ferry push --json`: the per-status counts of the server's answers.
///
/// ```json
/// {"sent":1,"applied":1,"rejected":0,"gone":0,"invalid":0,"forbidden":0,"unanswered":0,"remaining":0,"merged":0}
/// ```
struct PushJSON: Encodable {
    let result: PushResult

    enum CodingKeys: String, CodingKey {
        case sent, applied, rejected, gone, invalid, forbidden, unanswered, remaining, merged, attachments
    }

    /// `attachments: {uploaded, bytes, pending}`.
    struct Attachments: Encodable {
        let uploaded: Int
        let bytes: Int64
        let pending: Int
    }

    func encode(to encoder: any Encoder) throws {
        let summary = result.summary
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(result.sent, forKey: .sent)
        try container.encode(summary.applied, forKey: .applied)
        try container.encode(summary.rejected, forKey: .rejected)
        try container.encode(summary.gone, forKey: .gone)
        try container.encode(summary.invalid, forKey: .invalid)
        try container.encode(summary.forbidden, forKey: .forbidden)
        try container.encode(summary.unanswered, forKey: .unanswered)
        try container.encode(result.remaining, forKey: .remaining)
        try container.encode(summary.merged, forKey: .merged)
        let attachments = result.attachments
        try container.encode(
            Attachments(uploaded: attachments.uploaded, bytes: attachments.bytes, pending: attachments.pending),
            forKey: .attachments)
    }
}

extension PushResult {
    /// One line for a person: what was sent and how the server answered.
    var text: String {
        let edits = editsText
        let a = attachments
        guard a.uploaded > 0 || a.pending > 0 else { return edits }
        let uploaded =
            "uploaded \(a.uploaded) attachment\(a.uploaded == 1 ? "" : "s") (\(ProgressBar.bytes(a.bytes)))"
        return uploaded + "; \(a.pending) still queued (\(ProgressBar.bytes(a.pendingBytes)))\n" + edits
    }

    private var editsText: String {
        let s = summary
        guard sent > 0 else {
            return remaining > 0 ? "no edit pushed; \(remaining) still queued" : "nothing to push: the outbox is empty"
        }
        var line =
            "pushed \(sent) edit\(sent == 1 ? "" : "s"): applied \(s.applied), rejected \(s.rejected), gone \(s.gone)"
        line += ", invalid \(s.invalid), forbidden \(s.forbidden)"
        if s.merged > 0 { line += ", merged \(s.merged)" }
        if s.unanswered > 0 { line += ", unanswered \(s.unanswered)" }
        return line + "; \(remaining) still queued"
    }
}
