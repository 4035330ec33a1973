import FerryCore

/// What a ``ChangeMerger`` asks before it writes a change whose value in an attachment column (the template's
/// `attachments:`) names an attachment: which of the named ones the server does not hold. A change naming one it
/// lacks is answered `invalid`, naming the column, and nothing of it is written. The server answers from its
/// attachment store; FerryMerge itself knows no store.
///
/// ```swift
/// struct Uploaded: HeldAttachments {
///     let names: Set<String>
///     func missing(_ wanted: Set<String>, dataset: String) async throws -> Set<String> { wanted.subtracting(names) }
/// }
/// let results = try await merger.apply(batch, scope: nil, attachments: Uploaded(names: uploaded))
/// ```
public protocol HeldAttachments: Sendable {
    /// The names among `names` (SHA-256s) that dataset `dataset` does not hold. Throw when that cannot be known now
    /// (the batch is then refused as a whole and retried).
    func missing(_ names: Set<String>, dataset: String) async throws -> Set<String>
}

extension ChangeMerger {
    /// Per change, the refusal of an attachment value it writes (not a SHA-256, or one `attachments` lacks); nil
    /// where it has none. Deletes name nothing.
    func attachmentRefusals(_ changes: [Change], attachments: (any HeldAttachments)?) async throws -> [String?] {
        guard let attachments, !attachmentColumns.isEmpty else { return changes.map { _ in nil } }
        var named: Set<String> = []
        for change in changes where change.op != .delete {
            for column in attachmentColumns[change.table] ?? [] {
                if case .string(let text) = change.values[column], Attachment.isID(text) { named.insert(text) }
            }
        }
        let missing = named.isEmpty ? [] : try await attachments.missing(named, dataset: dataset)
        return changes.map { change in
            guard change.op != .delete else { return nil }
            for column in (attachmentColumns[change.table] ?? []).sorted() {
                switch change.values[column] {
                case nil, .null?:
                    continue
                case .string(let text)? where Attachment.isID(text):
                    if missing.contains(text) {
                        return
                            "column \(change.table).\(column) names attachment \(text), which the server does not hold: upload it first (PUT /v1/datasets/\(dataset)/attachments/\(text)), then send the change again"
                    }
                default:
                    return
                        "column \(change.table).\(column) holds an attachment: its value is the SHA-256 of the attachment's bytes (64 lowercase hex characters) or null"
                }
            }
            return nil
        }
    }
}
