import FerryCore

/// What one ``FerryClient/checkForUpdates(progress:)`` did.
///
/// ```swift
/// let result = try await client.checkForUpdates()
/// if result.outcome == .updateDownloaded { try await client.applyPendingUpdate() }
/// ```
public struct FetchResult: Sendable, Equatable {
    public enum Outcome: String, Sendable {
        /// 304: nothing new (or only something refused).
        case notModified
        /// There was no database.db: the snapshot went straight to `database.db`.
        case initialSync
        /// A verified snapshot now waits as `updated.db`.
        case updateDownloaded
    }

    public var outcome: Outcome
    /// Version and checksum of what was downloaded, nil for ``Outcome/notModified``.
    public var version: Int?
    public var sha256: String?
    /// Bytes received over the network by this call: the compressed bytes when the server sent its gzip copy
    /// (a resumed prefix is not counted).
    public var bytesReceived: Int64
    /// The byte of the transfer (of the gzip copy, when compressed) this call resumed after (0 when it started fresh).
    public var resumedFrom: Int64
    /// The directory's status afterwards.
    public var status: ClientStatus
    /// Size of the SQLite file the device now holds for this version, nil when nothing was downloaded. After a full
    /// download it is the published file (what its checksum covers); after a patch it is the device's own file,
    /// which also holds its outbox and may keep free pages, so it can differ from ``publishedBytes``.
    public var fileBytes: Int64? = nil
    /// Size of the version's file as published (the manifest's `size`), nil when nothing was downloaded. A patch's
    /// bytes moved are measured against it.
    public var publishedBytes: Int64? = nil
    /// How the snapshot travelled: ``TransferEncoding/gzip`` (inflated on arrival) or ``TransferEncoding/identity``;
    /// nil when nothing was downloaded.
    public var encoding: TransferEncoding? = nil
    /// How the version arrived (nil when nothing was downloaded).
    public var path: UpdatePath? = nil
    /// Why a patch the server offered was not used (the full download was taken instead); nil otherwise.
    public var patchFailure: String? = nil
    /// For a patch: how many rows the device had written itself (pushed or queued) that the patch settled, put back
    /// as published before it applied; nil when no patch was applied.
    public var ownRowsSettled: Int? = nil
    /// The wait the server applied to this check's manifest request, in seconds (`Preference-Applied: wait=N`, for
    /// ``FerryClient/Configuration/waitForChanges``); nil when it applied none, or none was asked for.
    public var waitApplied: Int? = nil
    /// `Retry-After` of the manifest response, in seconds, when it carried one: how long the server asks the client
    /// to wait before asking again.
    public var retryAfter: Int? = nil
}

/// How a version reached the device: the compressed full download, or a row-level patch from the version it held.
///
/// ```swift
/// if case .patch(let from, let to) = result.path { print("patched \(from) → \(to)") }
/// ```
public enum UpdatePath: Sendable, Equatable, Codable {
    case full
    case patch(from: Int, to: Int)

    /// `"full"` or `"patch"`.
    public var name: String {
        switch self {
        case .full: return "full"
        case .patch: return "patch"
        }
    }
}

/// What one ``FerryClient/applyPendingUpdate()`` did.
///
/// ```swift
/// let result = try await client.applyPendingUpdate()
/// print(result.applied ? "now version \(result.version ?? 0)" : result.message)
/// ```
public struct ApplyResult: Sendable, Equatable {
    /// False when nothing was pending: then the call changed nothing.
    public var applied: Bool
    /// The live version afterwards.
    public var version: Int?
    /// The version kept as `previous.db`, when applied.
    public var previousVersion: Int?
    /// One line for a person.
    public var message: String
    public var status: ClientStatus
}

/// What one ``FerryClient/rollback()`` did.
public struct RollbackResult: Sendable, Equatable {
    /// The live version afterwards (the former previous.db).
    public var version: Int?
    /// The version that was rolled back; it is not downloaded again.
    public var rolledBackVersion: Int?
    public var status: ClientStatus
}
