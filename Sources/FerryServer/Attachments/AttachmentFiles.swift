import FerryCore
import HTTPTypes

/// The public attachments the route served lately, with their files held open and their 200's fields, so that a
/// plain `GET` of one is sent from the channel with `sendfile(2)`, as a snapshot is (``ChannelRevalidator/download(_:)``,
/// ``RawNotModifiedHandler``): the channel does no I/O and asks no store, so it answers only what the route answered
/// before, from this memory, and leaves the rest (a first request, a scoped dataset, a range, a revalidation) to the
/// router. At most ``limit`` entries (each holds a file descriptor), all dropped when full; retention forgets what
/// it deletes.
final class AttachmentFiles: Sendable {
    struct Entry: Sendable {
        let file: OpenFile
        /// The route's 200 fields, `Content-Length` included, without Date.
        let fields: HTTPFields
    }

    let limit: Int
    private let entries = Locked([String: Entry]())

    init(limit: Int = 256) {
        self.limit = limit
    }

    /// Remembers a public dataset's attachment the route just answered with its whole file.
    func remember(dataset: String, sha256: String, file: OpenFile, fields: HTTPFields) {
        var fields = fields
        fields[.contentLength] = String(file.size)
        let entry = Entry(file: file, fields: fields)
        entries.withLock { entries in
            if entries.count >= limit, entries[dataset + "/" + sha256] == nil {
                entries.removeAll(keepingCapacity: true)
            }
            entries[dataset + "/" + sha256] = entry
        }
    }

    /// Forgets attachment `sha256` under every dataset name (retention deleted it).
    func forget(sha256: String) {
        entries.withLock { entries in entries = entries.filter { !$0.key.hasSuffix("/" + sha256) } }
    }

    /// The entry of `dataset`'s attachment `sha256`, if the route served it lately.
    func entry(dataset: String, sha256: String) -> Entry? {
        entries.withLock { $0[dataset + "/" + sha256] }
    }

    /// `/v1/datasets/{dataset}/attachments/{sha256}` in its one canonical form; nil for any other path.
    static func parse(_ path: String) -> (dataset: String, sha256: String)? {
        let prefix = "/v1/datasets/"
        guard path.utf8.starts(with: prefix.utf8) else { return nil }
        let parts = path.utf8.dropFirst(prefix.utf8.count).split(
            separator: UInt8(ascii: "/"), maxSplits: 3, omittingEmptySubsequences: false)
        guard parts.count == 3, parts[1].elementsEqual("attachments".utf8), let dataset = String(parts[0]),
            DatasetName.isValid(dataset), let sha256 = String(parts[2]), Attachment.isID(sha256)
        else { return nil }
        return (dataset, sha256)
    }
}
