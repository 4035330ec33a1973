import FerryCore
import FerryStore
import Foundation
import Logging
import NIOPosix

/// Catch-up patches (docs/delta.md, "Catching up"): a device on any version from ``from`` on gets one patch to the
/// current version, `/patches/{v}-{current}`, though the manifest names none from its version. The server makes it
/// on the first request from the steps after the newest version of the scope's history at or before `v` (its
/// **base**: `v` itself, or the point a compacted span of the history was merged from), merged into the net change
/// (`sqlite3changegroup`), compressed as the publisher compresses a patch (gzip level 6), and keeps it in its build
/// cache until the next version: every device in that span gets the same bytes, and every server makes them alike.
/// A device whose version lies after the base applies it by the rule for such patches (docs/delta.md), and
/// verifies the result as strictly as any other.
///
/// The merges are capped: one per distinct base however many ask, on the catalog's ``BuildLane`` (a bounded number
/// at once, a bounded queue, then `503` with `Retry-After`), and a merge larger than the newest checkpoint's gzip copy
/// is dropped (the device takes the full download).
final class CatchUp: Sendable {
    let dataset: String
    /// The oldest version a catch-up patch starts at.
    let from: Int
    /// The scope's history and retained versions, oldest first, whose steps are merged.
    let chain: [VersionRecord]
    let builds: VersionBuilds
    let scoped: Bool
    /// A patch must be smaller than this (the checkpoint a new device downloads): otherwise there is none.
    let limit: Int64
    let logger: Logger
    /// The merges started, by base version: a second request awaits the first one's task.
    private let built = Locked<[Int: Task<VersionEntry?, any Error>]>([:])
    /// Finished merges' results by base version, so a lookup never waits.
    private let finishedEntries = Locked<[Int: VersionEntry]>([:])

    init(
        dataset: String, from: Int, chain: [VersionRecord], builds: VersionBuilds, scoped: Bool, limit: Int64,
        logger: Logger
    ) {
        self.dataset = dataset
        self.from = from
        self.chain = chain
        self.builds = builds
        self.scoped = scoped
        self.limit = limit
        self.logger = logger
    }

    /// Whether `key` names a catch-up patch: to the current version, from a version the history covers.
    func covers(_ key: PatchKey) -> Bool {
        key.to == chain.last?.version && key.from >= from && key.from < key.to
    }

    /// The version a catch-up from `version` merges from: the newest one of the chain at or before it.
    func base(of version: Int) -> Int? {
        chain.last { $0.version <= version }?.version
    }

    /// The made patch `key` from the finished merges.
    func ready(_ key: PatchKey) -> VersionEntry? {
        guard covers(key), let base = base(of: key.from) else { return nil }
        return finishedEntries.withLock { $0[base] }
    }

    /// A made patch by its content-addressed name (`/objects/{object}`).
    func representation(_ object: ObjectName) -> VersionEntry.Representation? {
        finishedEntries.withLock { entries in entries.values.first { $0.identity.object == object }?.identity }
    }

    /// Makes patch `key` (once per base; concurrent callers wait for the same merge) on the build lane. Nil when the
    /// net change is not smaller than ``limit``, or when it cannot be made (logged: the device takes the full
    /// download). Throws `503` when the lane is full.
    func build(_ key: PatchKey) async throws -> VersionEntry? {
        guard covers(key), let base = base(of: key.from) else { return nil }
        if let ready = finishedEntries.withLock({ $0[base] }) {
            builds.cache.hit(dataset: dataset, key: "catch-up-\(base)-\(key.to)-\(ready.sha256)")
            return ready
        }
        builds.cache.miss(dataset: dataset)
        let task = built.withLock { tasks in
            if let task = tasks[base] { return task }
            let task = Task {
                try await self.builds.lane.run(.merge, dataset: self.dataset, name: "ferry-merge") {
                    try self.make(from: base)
                }
            }
            tasks[base] = task
            return task
        }
        do {
            let entry = try await task.value
            if let entry { finishedEntries.withLock { $0[base] = entry } }
            return entry
        } catch let error as ServerError {
            // Refused by the lane: a later request may find a slot.
            built.withLock { _ = $0.removeValue(forKey: base) }
            throw error
        } catch {
            logger.warning(
                "cannot make a catch-up patch; devices take the full download",
                metadata: ["dataset": "\(dataset)", "from": "\(base)", "to": "\(key.to)", "error": "\(error)"])
            return nil
        }
    }

    /// Merges the steps after `base` up to the current version, compresses the result and opens it.
    private func make(from base: Int) throws -> VersionEntry? {
        let started = ContinuousClock.now
        guard let start = chain.firstIndex(where: { $0.version == base }), let target = chain.last else {
            return nil
        }
        let builder = builds.builder(dataset)
        var steps: [Changeset] = []
        for record in chain[(start + 1)...] {
            guard let step = record.step else { return nil }
            steps.append(try builder.loadStep(step, dataset: dataset))
        }
        let merged = steps.count == 1 ? steps[0] : try Changeset.combine(steps)
        let tmp = builder.cache.appendingPathComponent("tmp", isDirectory: true)
        try DurableFile.makeDirectory(tmp)
        let raw = tmp.appendingPathComponent("catch-up-\(base)-\(target.version)-\(UUID().uuidString)")
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
        let name = "catch-up-\(base)-\(target.version)-\(sha256)"
        let file = builder.cache.appendingPathComponent("\(name).patch.gz")
        try DurableFile.rename(compressed, to: file)
        builds.added(dataset: dataset, key: name)
        guard let open = try OpenFile.open(path: file.path) else { return nil }
        let ref = PatchRef(from: base, to: target.version, size: size, sha256: sha256, base: chain[start].sha256)
        logger.info(
            "made a catch-up patch",
            metadata: [
                "dataset": "\(dataset)", "from": "\(base)", "to": "\(target.version)", "steps": "\(steps.count)",
                "bytes": "\(size)", "seconds": "\((ContinuousClock.now - started).inSeconds)",
            ])
        return .patch(dataset: dataset, ref, to: target, file: open, scoped: scoped, inStore: false)
    }
}
