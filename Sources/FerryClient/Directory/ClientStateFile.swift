import FerryCore
import Foundation

/// What the client knows about one snapshot file: its published checksum and the version inside it.
///
/// ```swift
/// let info = try client.status()   // built from SnapshotInfo of database.db and updated.db
/// ```
public struct SnapshotInfo: Codable, Equatable, Sendable {
    /// SHA-256 hex of the file as published.
    public var sha256: String
    /// `ferry_snapshot.version`, nil when the file has no readable metadata.
    public var version: Int?
    /// `ferry_snapshot.schemaVersion`, nil when the file has no readable metadata.
    public var schemaVersion: Int?
    /// `ferry_snapshot.dataset`, nil when the file has no readable metadata.
    public var dataset: String?

    public init(sha256: String, version: Int?, schemaVersion: Int?, dataset: String?) {
        self.sha256 = sha256
        self.version = version
        self.schemaVersion = schemaVersion
        self.dataset = dataset
    }
}

/// `DIR/.ferry/state.json`: a cache, never the truth. The files decide the state; this only saves rehashing a large
/// file on every status call, and remembers snapshots the app refused (rolled back, or a schema it does not accept)
/// so they are sent in `If-None-Match` and not downloaded again. Losing it costs one rehash, nothing else.
struct ClientStateFile: Codable, Equatable, Sendable {
    struct CachedChecksum: Codable, Equatable, Sendable {
        var identity: FileIdentity
        var info: SnapshotInfo
    }

    enum RefusalReason: String, Codable, Sendable {
        case rollback
        case schema
    }

    struct Refused: Codable, Equatable, Sendable {
        var sha256: String
        var version: Int?
        var reason: RefusalReason
        var schemaVersion: Int?
    }

    /// How a version arrived, by its published checksum.
    struct Arrival: Codable, Equatable, Sendable {
        var sha256: String
        var path: UpdatePath
        /// The version's content digest, the starting point of the next patch's check.
        var contentDigest: String?
        /// For a patch: the rows the device wrote itself that it put back as published (optional in the file).
        var ownRowsSettled: Int? = nil
    }

    var checksums: [CachedChecksum] = []
    var refused: [Refused] = []
    /// Optional in the file: a state.json from before patches has none.
    var arrivals: [Arrival]? = nil

    static let maxEntries = 8

    /// Loads the cache; a missing file is an empty cache. An unreadable or malformed one is an empty cache too (the
    /// checksums are rebuilt by hashing), reported through `log` because the refusals it held are lost with it.
    static func load(from url: URL, log: (String) -> Void) -> ClientStateFile {
        guard let data = FileManager.default.contents(atPath: url.path) else {
            if FileManager.default.fileExists(atPath: url.path) {
                log("\(url.path) cannot be read; starting with an empty checksum cache")
            }
            return ClientStateFile()
        }
        var state: ClientStateFile
        do {
            state = try JSONDecoder().decode(ClientStateFile.self, from: data)
        } catch {
            log(
                "\(url.path) is malformed (\(error)); starting with an empty checksum cache, so a version refused by rollback or schema may be downloaded once more"
            )
            return ClientStateFile()
        }
        state.checksums = state.checksums.filter { SHA256Hex.isValid($0.info.sha256) }
        state.refused = state.refused.filter { SHA256Hex.isValid($0.sha256) }
        return state
    }

    /// Writes the cache durably (temp, fsync, rename), unless the file already holds exactly these bytes because
    /// this process wrote them and nobody has replaced the file since (same inode, size and time): a swap asks to
    /// save several times, often with nothing changed, and each write costs two fsyncs.
    func save(to url: URL) throws {
        let path = url.standardizedFileURL.path
        if let last = Self.written.withLock({ $0[path] }), last.state == self, let identity = FileIdentity.of(url),
            identity == last.identity
        {
            return
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try DurableFile.write(try encoder.encode(self), to: url)
        let identity = FileIdentity.of(url)
        Self.written.withLock { $0[path] = identity.map { (self, $0) } }
    }

    /// What this process last wrote to each state file, and the file's identity right after: a file replaced by
    /// anyone else (another process, a restore) has another inode, so it is written again.
    private static let written = Locked<[String: (state: ClientStateFile, identity: FileIdentity)]>([:])

    func cached(_ identity: FileIdentity) -> SnapshotInfo? {
        checksums.first { $0.identity == identity }?.info
    }

    mutating func remember(_ identity: FileIdentity, _ info: SnapshotInfo) {
        checksums.removeAll { $0.identity.inode == identity.inode }
        checksums.append(CachedChecksum(identity: identity, info: info))
        if checksums.count > Self.maxEntries { checksums.removeFirst(checksums.count - Self.maxEntries) }
    }

    /// Drops what is cached for the file with this inode (its contents are about to change in place).
    mutating func forget(inode: UInt64) {
        checksums.removeAll { $0.identity.inode == inode }
    }

    mutating func arrived(_ sha256: String, by path: UpdatePath, contentDigest: String?, ownRowsSettled: Int? = nil) {
        var list = (arrivals ?? []).filter { $0.sha256 != sha256 }
        list.append(Arrival(sha256: sha256, path: path, contentDigest: contentDigest, ownRowsSettled: ownRowsSettled))
        arrivals = Array(list.suffix(Self.maxEntries))
    }

    func arrival(of sha256: String?) -> Arrival? {
        guard let sha256 else { return nil }
        return arrivals?.last { $0.sha256 == sha256 }
    }

    mutating func refuse(_ info: SnapshotInfo, reason: RefusalReason) {
        refused.removeAll { $0.sha256 == info.sha256 }
        refused.append(
            Refused(sha256: info.sha256, version: info.version, reason: reason, schemaVersion: info.schemaVersion))
        if refused.count > Self.maxEntries { refused.removeFirst(refused.count - Self.maxEntries) }
    }

    /// Checksums the server should answer 304 for: refused snapshots that are still refused under `accepts`.
    func refusedChecksums(accepts: (Int) -> Bool) -> [String] {
        refused.filter { entry in
            switch entry.reason {
            case .rollback: return true
            case .schema: return entry.schemaVersion.map { !accepts($0) } ?? true
            }
        }.map(\.sha256)
    }
}

extension ClientDirectory {
    /// The checksum and version of `file`, from the cache when its inode, size and mtime are unchanged, else by
    /// hashing it and reading its `ferry_snapshot` row (then cached in `state`). Nil when the file does not exist.
    func info(of file: URL, state: inout ClientStateFile) throws -> SnapshotInfo? {
        guard let identity = try FileIdentity.read(file) else { return nil }
        if let cached = state.cached(identity) { return cached }
        // A file that SQLite cannot open or that has no ferry_snapshot row has no version (nil, shown as unknown); its
        // checksum still identifies it, and opening it for use reports why it is unusable.
        // Not SQLite: no version (see above).
        let connection = try? SQLiteConnection(path: file.path, mode: .readOnly)
        // As above: no readable metadata means no version, never a guessed one.
        let metadata = connection.flatMap { try? SnapshotMetadata.read(from: $0) }
        if metadata == nil, let connection, Self.isEmptyDatabase(connection) {
            // A SQLite file without a single table holds no snapshot: the app's database before its initial sync
            // (FerryGRDB opens its pool on database.db from the start). Not cached: its identity changes with it.
            return nil
        }
        // A database the outbox has written to keeps its published checksum inside (ferry_origin): its bytes
        // changed with the local edits, its version did not.
        // Looked up only in a readable snapshot, and then a failure to read it is an error.
        let origin = metadata == nil ? nil : try connection.flatMap { try OutboxSchema.publishedOrigin(of: $0) }
        let sha256 = try origin ?? FileDigest.sha256Hex(of: file)
        let info = SnapshotInfo(
            sha256: sha256, version: metadata?.version, schemaVersion: metadata?.schemaVersion,
            dataset: metadata?.dataset)
        state.remember(identity, info)
        return info
    }

    /// Whether `db` has no schema at all. A file SQLite cannot read is not empty: its checksum still identifies it.
    static func isEmptyDatabase(_ db: SQLiteConnection) -> Bool {
        do {
            return try db.scalar("SELECT count(*) FROM sqlite_master")?.integer == 0
        } catch {
            return false
        }
    }

    /// Reads the directory's status without changing any database file (the cache may be refreshed).
    func status(state: inout ClientStateFile) throws -> ClientStatus {
        let live = try info(of: database, state: &state)
        let pending = try info(of: updated, state: &state)
        let previousInfo = try info(of: previous, state: &state)
        let arrival = state.arrival(of: pending?.sha256 ?? live?.sha256)
        var status = ClientStatus(
            state: SyncState.derive(hasDatabase: live != nil, hasUpdate: pending != nil),
            version: live?.version, sha256: live?.sha256, pendingVersion: pending?.version,
            pendingSha256: pending?.sha256,
            previousVersion: previousInfo?.version, outbox: live == nil ? 0 : try queuedEdits(),
            path: arrival?.path, ownRowsSettled: arrival?.ownRowsSettled)
        status.partitions = try partitionStatus()
        return status
    }

    /// The number of edits in database.db's outbox; throws when it cannot be read (a status never shows a count it
    /// did not read).
    func queuedEdits() throws -> Int {
        do {
            return try Outbox.count(in: SQLiteConnection(path: database.path, mode: .readOnly))
        } catch let error as FerryError {
            throw FerryError(
                error.code,
                "cannot count the local edits waiting in database.db's outbox: \(error.message); the edits stay queued",
                path: database.path, underlying: error.underlying)
        }
    }
}
