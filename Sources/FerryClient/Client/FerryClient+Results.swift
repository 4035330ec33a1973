import FerryCore

/// What one ``FerryClient/checkForUpdates(progress:)`` did: nothing new, the initial sync, or an update that now
/// waits. Every case carries the ``Check`` (what any check has); a download adds what it brought.
///
/// ```swift
/// switch try await client.checkForUpdates() {
/// case .notModified: break
/// case .initialSync(let download): print("first version \(download.version)")
/// case .updateDownloaded: try await client.applyPendingUpdate()
/// }
/// ```
public enum FetchResult: Sendable, Equatable {
    /// 304: nothing new (or only something refused, or a download that was already present).
    case notModified(Check)
    /// There was no database.db: the snapshot went straight to `database.db`.
    case initialSync(Download)
    /// A verified version now waits as `updated.db` (or, for a FerryGRDB database applying patches as they arrive,
    /// is already live).
    case updateDownloaded(Download)

    /// The kind of outcome, without what it carries.
    public enum Outcome: String, Sendable {
        case notModified
        case initialSync
        case updateDownloaded
    }

    /// What every check has, whatever it found.
    ///
    /// ```swift
    /// if case .notModified(let check) = result, let wait = check.retryAfter { print("asked to wait \(wait) s") }
    /// ```
    public struct Check: Sendable, Equatable {
        /// The directory's status afterwards.
        public var status: ClientStatus
        /// The wait the server applied to this check's manifest request, in seconds (`Preference-Applied: wait=N`,
        /// for `Configuration.download.waitForChanges`); nil when it applied none, or none was asked for.
        public var waitApplied: Int?
        /// `Retry-After` of the manifest response, in seconds, when it carried one: how long the server asks the
        /// client to wait before asking again.
        public var retryAfter: Int?
        /// Bytes received over the network by this call: the compressed bytes when the server sent its gzip copy (a
        /// resumed prefix is not counted); for ``FetchResult/notModified(_:)`` 0, unless a download finished that
        /// turned out to be a version the device already had.
        public var bytesReceived: Int64
        /// The byte of the transfer (of the gzip copy, when compressed) this call resumed after (0 when it started
        /// fresh or moved nothing).
        public var resumedFrom: Int64
        /// Why a patch the server offered was not used (the full download was taken instead); nil otherwise.
        public var patchFailure: String?

        public init(
            status: ClientStatus, waitApplied: Int? = nil, retryAfter: Int? = nil, bytesReceived: Int64 = 0,
            resumedFrom: Int64 = 0, patchFailure: String? = nil
        ) {
            self.status = status
            self.waitApplied = waitApplied
            self.retryAfter = retryAfter
            self.bytesReceived = bytesReceived
            self.resumedFrom = resumedFrom
            self.patchFailure = patchFailure
        }
    }

    /// What a check that brought a version has, beside its ``Check``.
    ///
    /// ```swift
    /// if let download = result.download { print("version \(download.version): \(download.check.bytesReceived) bytes") }
    /// ```
    public struct Download: Sendable, Equatable {
        /// The version downloaded and its checksum (of the file as published).
        public var version: Int
        public var sha256: String
        /// Size of the SQLite file the device now holds for this version. After a full download it is the
        /// published file (what its checksum covers); after a patch it is the device's own file, which also holds
        /// its outbox and may keep free pages, so it can differ from ``publishedBytes``.
        public var fileBytes: Int64
        /// Size of the version's file as published (the manifest's `size`). A patch's bytes moved are measured
        /// against it.
        public var publishedBytes: Int64
        /// How the snapshot travelled: ``TransferEncoding/gzip`` (inflated on arrival) or
        /// ``TransferEncoding/identity``.
        public var encoding: TransferEncoding
        /// How the version arrived: the full download, or a patch together with the rows it settled.
        public var path: UpdatePath
        /// For a patch: how many rows the device had written itself (pushed or queued) that the patch settled, put
        /// back as published before it applied; nil for a full download.
        public var ownRowsSettled: Int?
        /// What every check has: the status afterwards, the bytes received, the manifest request's pacing.
        public var check: Check

        public init(
            version: Int, sha256: String, fileBytes: Int64, publishedBytes: Int64, encoding: TransferEncoding,
            path: UpdatePath, ownRowsSettled: Int? = nil, check: Check
        ) {
            self.version = version
            self.sha256 = sha256
            self.fileBytes = fileBytes
            self.publishedBytes = publishedBytes
            self.encoding = encoding
            self.path = path
            self.ownRowsSettled = ownRowsSettled
            self.check = check
        }
    }

    /// The kind of outcome.
    ///
    /// ```swift
    /// if result.outcome == .updateDownloaded { try await client.applyPendingUpdate() }
    /// ```
    public var outcome: Outcome {
        switch self {
        case .notModified: return .notModified
        case .initialSync: return .initialSync
        case .updateDownloaded: return .updateDownloaded
        }
    }

    /// What was downloaded; nil for ``notModified(_:)``.
    public var download: Download? {
        switch self {
        case .notModified: return nil
        case .initialSync(let download), .updateDownloaded(let download): return download
        }
    }

    /// What every case has; settable, whichever case this is.
    ///
    /// ```swift
    /// if try await client.checkForUpdates().check.status.state == .updatePending { … }
    /// ```
    public var check: Check {
        get {
            switch self {
            case .notModified(let check): return check
            case .initialSync(let download), .updateDownloaded(let download): return download.check
            }
        }
        set {
            switch self {
            case .notModified: self = .notModified(newValue)
            case .initialSync(var download):
                download.check = newValue
                self = .initialSync(download)
            case .updateDownloaded(var download):
                download.check = newValue
                self = .updateDownloaded(download)
            }
        }
    }

    /// The directory's status afterwards (``check``'s).
    public var status: ClientStatus { check.status }

    /// Bytes received over the network by this call (``check``'s).
    public var bytesReceived: Int64 { check.bytesReceived }
}

/// How a version reached the device: the compressed full download, or a row-level patch from the version it held.
///
/// ```swift
/// if case .patch(let from, let to) = result.download?.path { print("patched \(from) → \(to)") }
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

/// What one ``FerryClient/applyPendingUpdate()`` did: nothing (no update was pending) or the swap.
///
/// ```swift
/// if case .applied(let version, _, _) = try await client.applyPendingUpdate() { print("now version \(version)") }
/// ```
public enum ApplyResult: Sendable, Equatable {
    /// Nothing was pending: the call changed nothing. `status` is the directory's status.
    case nothingPending(status: ClientStatus)
    /// The pending version is live; the former live version (nil on a first apply) is kept as `previous.db`.
    case applied(version: Int, previousVersion: Int?, status: ClientStatus)

    /// True when an update was applied.
    public var applied: Bool {
        if case .applied = self { return true }
        return false
    }

    /// The live version afterwards.
    public var version: Int? {
        switch self {
        case .nothingPending(let status): return status.version
        case .applied(let version, _, _): return version
        }
    }

    /// The version kept as `previous.db` by this apply; nil when nothing was applied or kept.
    public var previousVersion: Int? {
        if case .applied(_, let previous, _) = self { return previous }
        return nil
    }

    /// The directory's status afterwards.
    public var status: ClientStatus {
        switch self {
        case .nothingPending(let status), .applied(_, _, let status): return status
        }
    }
}

/// What one ``FerryClient/rollback()`` did.
public struct RollbackResult: Sendable, Equatable {
    /// The live version afterwards (the former previous.db).
    public var version: Int?
    /// The version that was rolled back; it is not downloaded again.
    public var rolledBackVersion: Int?
    public var status: ClientStatus
}
