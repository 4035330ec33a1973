import FerryCore
import FerryStore
import Foundation
import HTTPTypes
import Logging

/// Whole files of versions stored as steps, made only when a client asks for one whole (`/snapshot`,
/// `/versions/{n}`, or their object): a device never needs one, since it takes a checkpoint and patches
/// (docs/delta.md, "What a server does per version"), but curl, older clients and a cache filling from the object
/// lookup do. A file is built once however many ask at the same time, on the ``BuildLane`` (its own threads, a
/// bounded number at once), into the ``BuildCache`` (least recently used files evicted past its size), by
/// ``VersionBuilder``: from the nearest checkpoint, each step checked, the result checked against the SHA-256 the
/// publisher recorded, so it is byte for byte the published file; then its gzip copy is made beside it.
///
/// ```swift
/// let entry = try await builds.entry(for: .init(dataset: "trips", record: record, entry: scope, manifest: stored,
///                                               scoped: false))
/// ```
final class VersionBuilds: Sendable {
    /// What to build: a retained version of one scope, as the loaded manifest describes it.
    struct Request: Sendable {
        let dataset: String
        let record: VersionRecord
        let entry: ScopeEntry
        let manifest: StoredManifest
        let scoped: Bool

        /// A version entry's headers depend on its number, file and audience.
        var key: String { "\(dataset)/\(record.version)/\(record.sha256)/\(scoped)" }
    }

    let store: any SnapshotStore
    let lane: BuildLane
    let cache: BuildCache
    /// How the gzip copy of a built version is deflated: zlib's fastest level, over every core.
    let gzipEncoding = Gzip.ChunkEncoding.zlib(level: 1)
    let logger: Logger
    private let tasks = Locked<[String: Task<VersionEntry, any Error>]>([:])
    /// Built entries by ``Request/key``, until their files are evicted or no manifest names them.
    private let ready = Locked<[String: VersionEntry]>([:])

    init(store: any SnapshotStore, lane: BuildLane, cache: BuildCache, logger: Logger) {
        self.store = store
        self.lane = lane
        self.cache = cache
        self.logger = logger
    }

    /// The builder of dataset `dataset`'s versions, into its directory of the cache.
    func builder(_ dataset: String) -> VersionBuilder {
        VersionBuilder(store: store, cache: cache.directory(dataset))
    }

    /// The entry of `request` if built, without waiting.
    func ready(_ request: Request) -> VersionEntry? { ready.withLock { $0[request.key] } }

    /// The built entry of `request`: at once when built, else after the build (shared with every concurrent caller).
    /// Throws `503` when the lane is full, `404` for a version kept only to catch up from
    /// (``VersionRecord/catchUpOnly``), and `500` naming the object that failed when the version cannot be built.
    func entry(for request: Request) async throws -> VersionEntry {
        if request.record.catchUpOnly == true {
            // Like a version no longer retained: a device takes the current version or patches
            let error = VersionBuilder.catchUpOnly(request.record, dataset: request.dataset)
            throw ServerError(.notFound, code: error.code.rawValue, error.message)
        }
        if let entry = ready(request) {
            cache.hit(dataset: request.dataset, key: request.record.sha256)
            return entry
        }
        cache.miss(dataset: request.dataset)
        let task = tasks.withLock { tasks in
            if let task = tasks[request.key] { return task }
            let task = Task {
                try await self.lane.run(.build, dataset: request.dataset, name: "ferry-build") {
                    try self.make(request)
                }
            }
            tasks[request.key] = task
            return task
        }
        do {
            let entry = try await task.value
            ready.withLock { $0[request.key] = entry }
            tasks.withLock { _ = $0.removeValue(forKey: request.key) }
            added(dataset: request.dataset, key: request.record.sha256)
            return entry
        } catch let error as ServerError {
            tasks.withLock { _ = $0.removeValue(forKey: request.key) }
            throw error
        } catch {
            tasks.withLock { _ = $0.removeValue(forKey: request.key) }
            logger.error(
                "cannot build a version for a whole-file request; it is not served whole",
                metadata: [
                    "dataset": "\(request.dataset)", "version": "\(request.record.version)", "error": "\(error)",
                ])
            throw ServerError(
                .internalServerError, code: FerryError.Code.store.rawValue,
                "version \(request.record.version) of dataset '\(request.dataset)' cannot be built whole; devices update by patch, and the server's log names the object that failed"
            )
        }
    }

    /// Counts the files of `key` just made in the cache, and forgets the entries whose files it evicted to fit.
    func added(dataset: String, key: String) {
        forget(evicted: cache.added(dataset: dataset, key: key))
    }

    /// Forgets the entries of dataset `dataset` whose file `keeping` does not name, and removes their files.
    func prune(dataset: String, keeping: Set<String>) {
        let removed = cache.prune(dataset: dataset) { keeping.contains($0) }
        forget(evicted: removed.map { "\(dataset)/\($0)" })
    }

    /// Drops the ready entries of the evicted `DATASET/SHA256` keys: the next request builds them again.
    private func forget(evicted: [String]) {
        guard !evicted.isEmpty else { return }
        let gone = Set(evicted)
        ready.withLock { entries in
            entries = entries.filter { !gone.contains("\($0.value.dataset)/\($0.value.sha256)") }
        }
    }

    /// Builds the file (or finds it built before a restart), makes its gzip copy beside it, and opens both.
    private func make(_ request: Request) throws -> VersionEntry {
        let started = ContinuousClock.now
        let builder = builder(request.dataset)
        let file = try builder.file(of: request.record, in: request.entry, manifest: request.manifest)
        let gzip = file.appendingPathExtension("gz")
        if !FileManager.default.fileExists(atPath: gzip.path) {
            let tmp = builder.cache.appendingPathComponent("tmp", isDirectory: true)
            try DurableFile.makeDirectory(tmp)
            let scratch = tmp.appendingPathComponent("\(request.record.sha256)-\(UUID().uuidString).gz")
            do {
                _ = try Gzip.compressAndHashParallel(from: file, to: scratch, encoding: gzipEncoding)
                try DurableFile.rename(scratch, to: gzip)
            } catch {
                try? FileManager.default.removeItem(at: scratch)  // scratch of this call; the error says what failed
                throw error
            }
        }
        guard let snapshot = try OpenFile.open(path: file.path), snapshot.size == request.record.size,
            let compressed = try OpenFile.open(path: gzip.path)
        else {
            throw FerryError(.store, "a built file went missing or changed size", path: file.path)
        }
        logger.info(
            "built a version for a whole-file request",
            metadata: [
                "dataset": "\(request.dataset)", "version": "\(request.record.version)",
                "seconds": "\((ContinuousClock.now - started).inSeconds)",
            ])
        return VersionEntry(
            dataset: request.dataset, record: request.record, snapshot: snapshot, gzipFile: compressed,
            gzipSHA256: try compressed.sha256Hex(), scoped: request.scoped)
    }
}
