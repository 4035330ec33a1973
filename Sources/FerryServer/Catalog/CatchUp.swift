import FerryCore
import FerryStore
import Foundation
import Logging
import NIOPosix

/// Catch-up patches (docs/delta.md, "Catching up"): a device on any version from ``from`` on gets one patch to the
/// current version, `/patches/{v}-{current}`, though the manifest names none from its version. The server makes it
/// on the first request from the steps between the two versions, merged into the net change
/// (`sqlite3changegroup`), compressed as the publisher compresses a patch (gzip level 6), and keeps it in its build
/// cache until the next version: every later request, and every server, answers the same bytes under the same
/// immutable URL. Concurrent first requests share one build.
final class CatchUp: Sendable {
    let dataset: String
    /// The oldest version a catch-up patch starts at.
    let from: Int
    /// The scope's history and retained versions, oldest first, whose steps are merged.
    let chain: [VersionRecord]
    let builder: VersionBuilder
    let scoped: Bool
    /// A patch must be smaller than this (the full download's compressed size): otherwise there is none.
    let limit: Int64
    let logger: Logger
    /// The builds started, by pair: a second request for a pair awaits the first one's task.
    private let built = Locked<[PatchKey: Task<VersionEntry?, any Error>]>([:])

    init(
        dataset: String, from: Int, chain: [VersionRecord], builder: VersionBuilder, scoped: Bool, limit: Int64,
        logger: Logger
    ) {
        self.dataset = dataset
        self.from = from
        self.chain = chain
        self.builder = builder
        self.scoped = scoped
        self.limit = limit
        self.logger = logger
    }

    /// Whether `key` names a catch-up patch: to the current version, from a version within the history.
    func covers(_ key: PatchKey) -> Bool {
        key.to == chain.last?.version && key.from >= from && key.from < key.to
            && chain.contains { $0.version == key.from }
    }

    /// Finished builds' results, so a lookup never waits.
    private let finishedEntries = Locked<[PatchKey: VersionEntry]>([:])

    /// The built patch `key` from the cache of finished builds.
    func ready(_ key: PatchKey) -> VersionEntry? { finishedEntries.withLock { $0[key] } }

    /// A built patch by its content-addressed name (`/objects/{object}`).
    func representation(_ object: ObjectName) -> VersionEntry.Representation? {
        finishedEntries.withLock { entries in entries.values.first { $0.identity.object == object }?.identity }
    }

    /// Builds patch `key` (once; concurrent callers wait for the same build) on NIO's thread pool. Nil when the net
    /// change is not smaller than the full download. A failure is logged and answered nil: the device takes the full
    /// download.
    func build(_ key: PatchKey) async -> VersionEntry? {
        if let ready = ready(key) { return ready }
        let task = built.withLock { tasks in
            if let task = tasks[key] { return task }
            let task = Task { try await NIOThreadPool.singleton.runIfActive { try self.make(key) } }
            tasks[key] = task
            return task
        }
        do {
            let entry = try await task.value
            if let entry { finishedEntries.withLock { $0[key] = entry } }
            return entry
        } catch {
            logger.warning(
                "cannot make a catch-up patch; devices take the full download",
                metadata: ["dataset": "\(dataset)", "from": "\(key.from)", "to": "\(key.to)", "error": "\(error)"])
            return nil
        }
    }

    /// Merges the steps after `key.from` up to `key.to`, compresses the result and opens it.
    private func make(_ key: PatchKey) throws -> VersionEntry? {
        let started = ContinuousClock.now
        guard let start = chain.firstIndex(where: { $0.version == key.from }), let target = chain.last else {
            return nil
        }
        var steps: [Changeset] = []
        for record in chain[(start + 1)...] {
            guard let step = record.step else { return nil }
            steps.append(try builder.loadStep(step, dataset: dataset))
        }
        let merged = steps.count == 1 ? steps[0] : try Changeset.combine(steps)
        let tmp = builder.cache.appendingPathComponent("tmp", isDirectory: true)
        try DurableFile.makeDirectory(tmp)
        let raw = tmp.appendingPathComponent("catch-up-\(key.from)-\(key.to)-\(UUID().uuidString)")
        let compressed = raw.appendingPathExtension("gz")
        defer {
            // Scratch of this call; a leftover goes with the next prune of the build cache.
            try? FileManager.default.removeItem(at: raw)
            // as above: renamed away on success, scratch otherwise
            try? FileManager.default.removeItem(at: compressed)
        }
        try DurableFile.write(merged.data, to: raw)
        // Level 6, as the publisher's patches: the same bytes from every server.
        let size = try Gzip.compressFile(from: raw, to: compressed, level: 6)
        guard size < limit else { return nil }
        let sha256 = try FileDigest.sha256Hex(of: compressed)
        // Named `catch-up-…` so the build cache's prune removes it with the version it leads to.
        let file = builder.cache.appendingPathComponent("catch-up-\(key.from)-\(key.to)-\(sha256).patch.gz")
        try DurableFile.rename(compressed, to: file)
        guard let open = try OpenFile.open(path: file.path) else { return nil }
        let ref = PatchRef(from: key.from, to: key.to, size: size, sha256: sha256, base: chain[start].sha256)
        logger.info(
            "made a catch-up patch",
            metadata: [
                "dataset": "\(dataset)", "from": "\(key.from)", "to": "\(key.to)", "steps": "\(steps.count)",
                "bytes": "\(size)", "seconds": "\((ContinuousClock.now - started).inSeconds)",
            ])
        return .patch(dataset: dataset, ref, to: target, file: open, scoped: scoped, inStore: false)
    }
}
