import FerryClient

/// `ferry status --json`, and the first members of every client command's `--json` line: exactly these keys in this
/// order, `null` when absent.
///
/// ```json
/// {"state":"updatePending","version":3,"sha256":"…","pendingVersion":4,"pendingSha256":"…","outbox":0}
/// ```
struct StatusJSON: Encodable {
    let status: ClientStatus

    init(_ status: ClientStatus) { self.status = status }

    enum CodingKeys: String, CodingKey {
        case state, version, sha256, pendingVersion, pendingSha256, outbox
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(status.state.rawValue, forKey: .state)
        try container.encode(status.version, forKey: .version)
        try container.encode(status.sha256, forKey: .sha256)
        try container.encode(status.pendingVersion, forKey: .pendingVersion)
        try container.encode(status.pendingSha256, forKey: .pendingSha256)
        try container.encode(status.outbox, forKey: .outbox)
    }
}

/// `ferry status --json`: the status, then how its newest version (pending, else live) arrived: `path` is `"patch"`
/// (with `patchFrom` and `patchTo`), `"full"`, or `null` when the client does not know; then `ownRowsSettled`, how
/// many rows the device had written itself that the patch settled (`null` unless it arrived by patch).
///
/// ```json
/// {…status…,"path":"patch","patchFrom":2,"patchTo":3,"ownRowsSettled":1}
/// ```
struct StatusCommandJSON: Encodable {
    let status: ClientStatus
    /// The id the directory sends as `Ferry-Device` (nil before its first request).
    var device: String? = nil

    enum CodingKeys: String, CodingKey { case ownRowsSettled, device, partitions }

    func encode(to encoder: any Encoder) throws {
        try StatusJSON(status).encode(to: encoder)
        try PathJSON(path: status.path).encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(status.ownRowsSettled, forKey: .ownRowsSettled)
        try container.encode(device, forKey: .device)
        // Only a partitioned directory has the key: [{"key","version","rows"}].
        try container.encodeIfPresent(status.partitions, forKey: .partitions)
    }
}

/// `path`, `patchFrom`, `patchTo`: how a version arrived (see ``UpdatePath``), `null` when unknown or nothing arrived.
struct PathJSON: Encodable {
    let path: UpdatePath?

    enum CodingKeys: String, CodingKey { case path, patchFrom, patchTo }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(path?.name, forKey: .path)
        var from: Int?
        var to: Int?
        if case .patch(let f, let t) = path { (from, to) = (f, t) }
        try container.encode(from, forKey: .patchFrom)
        try container.encode(to, forKey: .patchTo)
    }
}

/// `ferry apply --json` (`applied`) and `ferry rollback --json` (`rolledBackVersion`): the status, then one key of
/// the command's own (a nil value is `null`).
struct StatusAndOne<Value: Encodable>: Encodable {
    let status: ClientStatus
    let key: String
    let value: Value

    struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    func encode(to encoder: any Encoder) throws {
        try StatusJSON(status).encode(to: encoder)
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(value, forKey: Key(stringValue: key))
    }
}

/// `ferry fetch --json`: the status, then what the check did. `bytesReceived` counts the bytes received over the
/// network by this fetch (compressed when `encoding` is `gzip`), `resumedFrom` the byte of that transfer it resumed
/// after, `fileBytes` the size of the SQLite file it produced (`null` when nothing was downloaded), then the path it
/// took (``PathJSON``) and `patchError`, why a patch the server offered was not used (`null` when none was or it was).
///
/// ```json
/// {…status…,"result":"updateDownloaded","applied":false,"bytesReceived":8120,"resumedFrom":0,"fileBytes":49152,"encoding":"gzip",
///  "path":"patch","patchFrom":2,"patchTo":3,"patchError":null}
/// ```
struct FetchJSON: Encodable {
    let status: ClientStatus
    let result: FetchResult
    let applied: Bool
    /// The attachments brought in line after the fetch (nil when none was tried: no live database).
    var attachments: AttachmentSync?

    enum CodingKeys: String, CodingKey { case result, applied, bytesReceived, resumedFrom, fileBytes, encoding }
    enum ErrorKeys: String, CodingKey { case patchError, publishedBytes, ownRowsSettled, attachments }

    func encode(to encoder: any Encoder) throws {
        try StatusJSON(status).encode(to: encoder)
        let download = result.download
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(result.outcome.rawValue, forKey: .result)
        try container.encode(applied, forKey: .applied)
        try container.encode(result.bytesReceived, forKey: .bytesReceived)
        try container.encode(result.check.resumedFrom, forKey: .resumedFrom)
        try container.encode(download?.fileBytes, forKey: .fileBytes)
        try container.encode(download?.encoding.rawValue, forKey: .encoding)
        try PathJSON(path: download?.path).encode(to: encoder)
        var errors = encoder.container(keyedBy: ErrorKeys.self)
        try errors.encode(result.check.patchFailure, forKey: .patchError)
        // Added last: `--json` only ever adds fields. The published file's size, which a patch is measured against.
        try errors.encode(download?.publishedBytes, forKey: .publishedBytes)
        // The rows the device had written itself that the patch settled (`null` when no patch was applied).
        try errors.encode(download?.ownRowsSettled, forKey: .ownRowsSettled)
        try errors.encode(attachments.map(AttachmentSyncJSON.init), forKey: .attachments)
    }
}

/// `ferry sync --json`: the status, then what was pushed, fetched and applied.
struct SyncJSON: Encodable {
    let status: ClientStatus
    let result: SyncResult

    enum CodingKeys: String, CodingKey { case pushed, result, applied, attachments }

    func encode(to encoder: any Encoder) throws {
        try StatusJSON(status).encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(result.push.sent, forKey: .pushed)
        try container.encode(result.fetch.outcome.rawValue, forKey: .result)
        try container.encode(result.apply?.applied ?? false, forKey: .applied)
        try container.encode(result.attachments.map(AttachmentSyncJSON.init), forKey: .attachments)
    }
}

/// `attachments: {downloaded, bytes, missing, removed, evicted}` of `fetch --json` and `sync --json`; `missing`
/// lists the SHA-256s of the eager attachments still lacking.
struct AttachmentSyncJSON: Encodable {
    let downloaded: Int
    let bytes: Int64
    let missing: [String]
    let removed: Int
    let evicted: Int

    init(_ sync: AttachmentSync) {
        downloaded = sync.downloaded
        bytes = sync.bytes
        missing = sync.missing
        removed = sync.removed
        evicted = sync.evicted
    }
}

extension ApplyResult {
    /// One line for a person: what `ferry apply` did.
    var text: String {
        switch self {
        case .nothingPending:
            return "nothing to apply: no update is pending"
        case .applied(let version, let previousVersion, _):
            return "applied version \(version)"
                + (previousVersion.map { "; version \($0) kept as previous.db" } ?? "")
        }
    }
}

extension ClientStatus {
    /// A short human-readable summary, one fact per line.
    var text: String {
        var lines = ["state: \(state.rawValue)"]
        lines.append("version: " + (version.map { "\($0)" } ?? "none") + (sha256.map { " (sha256 \($0))" } ?? ""))
        lines.append(
            "pending: "
                + (pendingVersion.map { "version \($0)" } ?? (pendingSha256 == nil ? "none" : "unknown version"))
                + (pendingSha256.map { " (sha256 \($0))" } ?? ""))
        lines.append("outbox: \(outbox) local edit\(outbox == 1 ? "" : "s") waiting for upload")
        if let previousVersion { lines.append("previous: version \(previousVersion) (ferry rollback restores it)") }
        if case .patch(let from, let to) = path {
            let own = ownRowsSettled.flatMap { $0 > 0 ? ", settling \($0) rows this device had written" : nil } ?? ""
            lines.append("arrived: by patch \(from) → \(to)\(own)")
        }
        if let partitions {
            let each = partitions.map { p in
                "\(p.key) (" + (p.version.map { "version \($0), \(p.rows) rows" } ?? "not downloaded yet") + ")"
            }
            lines.append("partitions: " + (each.isEmpty ? "none subscribed" : each.joined(separator: ", ")))
        }
        return lines.joined(separator: "\n")
    }
}
