import FerryCore
import NIOCore

/// The 304s ``RawNotModifiedHandler`` answered for public datasets, by the exact bytes of their request head, so a
/// request whose head is byte for byte one answered before (a device or a cache revalidating the same URL with the
/// same headers, over and over) is answered without parsing it again.
///
/// A remembered answer holds the catalog view it was decided on. It is used only while that view is still the one
/// the catalog serves for the dataset: a new publish replaces the view, and every answer decided on the old one is
/// decided afresh. Equal head bytes make an equal request (method, path, every field), and a view never changes,
/// so the answer is the one the revalidator would give. Scoped datasets are not remembered: their answer also
/// depends on the token cache, which changes without the view changing. Nor is a request for a dataset's base name
/// that resolved to one of its schema lines: which line it resolves to changes without that line's view changing.
///
/// At most ``capacity`` heads are kept; a full memo is emptied and refilled, so memory stays bounded (a head is
/// at most the handler's `maxHeadBytes`) whatever the requests.
final class RevalidationMemo: Sendable {
    struct Entry: Sendable {
        let dataset: String
        /// The catalog view it was decided on (compared by identity only).
        let view: any AnyObject & Sendable
        let route: ChannelRevalidator.Route
        /// The 304's status line and fields, through `Date: ` (the date is written per answer).
        let prefix: ByteBuffer
        /// `GET /v1/…` for the debug log.
        let line: String
        /// The head's `Ferry-Device`, counted again at each answer (the status page's devices per dataset).
        var device: String?
    }

    static let capacity = 256
    private let entries = Locked<[ByteBuffer: Entry]>([:])

    /// The length of the request head at the start of `bytes` (through its empty line), if it ends within `limit`.
    static func headLength(_ bytes: UnsafeRawBufferPointer, limit: Int) -> Int? {
        let end = min(bytes.count, limit)
        guard end >= 4 else { return nil }
        var i = 3
        while i < end {
            if bytes[i] == 10, bytes[i - 1] == 13, bytes[i - 2] == 10, bytes[i - 3] == 13 { return i + 1 }
            i += 1
        }
        return nil
    }

    /// The answer remembered for `head` whose view `catalog` still serves.
    func answer(_ head: ByteBuffer, catalog: SnapshotCatalog) -> Entry? {
        guard let entry = entries.withLock({ $0[head] }), Self.isCurrent(entry, catalog: catalog) else { return nil }
        return entry
    }

    /// Whether `entry` was decided on the view `catalog` serves now for its dataset (still public).
    static func isCurrent(_ entry: Entry, catalog: SnapshotCatalog) -> Bool {
        guard case .everyone(let view) = catalog.access(entry.dataset) else { return false }
        return view === entry.view
    }

    /// Heads remembered now.
    var count: Int { entries.withLock { $0.count } }

    /// Remembers `entry` for `head`; returns the key kept, a copy of `head` in storage of its own (never a slice of
    /// the read buffer, which the channel reuses only while nothing else holds it).
    @discardableResult
    func remember(_ head: ByteBuffer, _ entry: Entry) -> ByteBuffer {
        let key = ByteBuffer(bytes: head.readableBytesView)
        entries.withLock {
            if $0.count >= Self.capacity { $0.removeAll(keepingCapacity: true) }
            $0[key] = entry
        }
        return key
    }
}
