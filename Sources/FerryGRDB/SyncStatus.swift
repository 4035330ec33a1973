import FerryClient
import FerryCore
import Foundation

/// What an app shows about sync: the three sync states (no data yet, up to date, update pending), the version, a download in progress, the edits waiting,
/// when the last check and push succeeded, the last error, and the rejected edits not yet acknowledged.
/// ``FerryDatabase/statusUpdates()`` yields it at once and after every change.
///
/// ```swift
/// for await status in ferry.statusUpdates() {
///     label.text = status.state == .updatePending ? "Update ready" : "v\(status.version ?? 0)"
/// }
/// ```
public struct SyncStatus: Sendable, Equatable {
    /// A download in progress.
    public struct Download: Sendable, Equatable {
        /// Bytes received so far (a resumed download counts its earlier prefix).
        public var bytesReceived: Int64
        /// The transfer's size, when the server said.
        public var totalBytes: Int64?
        /// A row-level patch (true) or the full version (false).
        public var isPatch: Bool
    }

    /// Initial sync required, up to date, or an update pending (downloaded, verified, not applied yet).
    public var state: SyncState
    /// The version the app's database holds; nil before the initial sync.
    public var version: Int?
    /// The version waiting to be applied (``FerryDatabase/ApplyMode/onRequest``), if any.
    public var pendingVersion: Int?
    /// The download in progress, if any.
    public var download: Download?
    /// Local edits waiting for the server's answer.
    public var queuedEdits: Int
    /// When a check with the server last succeeded (a 304 counts).
    public var lastCheck: Date?
    /// When a push last succeeded.
    public var lastPush: Date?
    /// The last error of a check, an apply or a push; nil after the next success. `FerryError.Code.offline` is normal.
    public var lastError: FerryError?
    /// Rejected edits not yet acknowledged (``FerryDatabase/rejectedEdits()``).
    public var rejectedEdits: Int
    /// Attachments waiting for upload (``FerryDatabase/Attachments/add(data:contentType:)``); the next push sends
    /// them before the edits that name them.
    public var pendingAttachments = 0
    /// Their bytes.
    public var pendingAttachmentBytes: Int64 = 0
    /// Attachment downloads in progress (eager ones after an update, on-demand ones the app asked for).
    public var attachmentDownloads = 0

    /// Whether the server refused the access token at the last check or push (401: expired, revoked or invalid;
    /// 403: it grants no access): show a sign-in prompt, then sync with the new token. Local reads and writes go on,
    /// and queued edits and attachments wait for it.
    public var tokenRefused: Bool { lastError?.code == .unauthorized }

    /// The status of a directory that was never synced.
    public static let initial = SyncStatus(
        state: .initialSyncRequired, version: nil, pendingVersion: nil, download: nil, queuedEdits: 0, lastCheck: nil,
        lastPush: nil,
        lastError: nil, rejectedEdits: 0)

    public static func == (lhs: SyncStatus, rhs: SyncStatus) -> Bool {
        lhs.state == rhs.state && lhs.version == rhs.version && lhs.pendingVersion == rhs.pendingVersion
            && lhs.download == rhs.download
            && lhs.queuedEdits == rhs.queuedEdits && lhs.lastCheck == rhs.lastCheck && lhs.lastPush == rhs.lastPush
            && lhs.lastError?.code == rhs.lastError?.code && lhs.lastError?.message == rhs.lastError?.message
            && lhs.rejectedEdits == rhs.rejectedEdits && lhs.pendingAttachments == rhs.pendingAttachments
            && lhs.pendingAttachmentBytes == rhs.pendingAttachmentBytes
            && lhs.attachmentDownloads == rhs.attachmentDownloads
    }
}

/// The current ``SyncStatus`` and its subscribers: each new one gets the current value at once, then every change.
final class StatusBroadcast: Sendable {
    private struct State: Sendable {
        var status = SyncStatus.initial
        var subscribers: [Int: AsyncStream<SyncStatus>.Continuation] = [:]
        var nextID = 0
        var finished = false
    }

    private let state = Locked(State())

    var current: SyncStatus { state.current.status }

    /// Changes the status; subscribers hear of it only when it actually changed.
    func update(_ change: (inout SyncStatus) -> Void) {
        state.withLock { state in
            var status = state.status
            change(&status)
            guard status != state.status else { return }
            state.status = status
            for continuation in state.subscribers.values { continuation.yield(status) }
        }
    }

    func stream() -> AsyncStream<SyncStatus> {
        let (stream, continuation) = AsyncStream.makeStream(of: SyncStatus.self, bufferingPolicy: .bufferingNewest(16))
        let id: Int? = state.withLock { state in
            continuation.yield(state.status)
            guard !state.finished else { return nil }
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = continuation
            return id
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Ends every stream (the database closed).
    func finish() {
        let subscribers = state.withLock { state in
            state.finished = true
            defer { state.subscribers = [:] }
            return Array(state.subscribers.values)
        }
        for continuation in subscribers { continuation.finish() }
    }
}
