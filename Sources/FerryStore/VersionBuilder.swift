import FerryCore
import Foundation

/// Builds the file of a version stored as a step (``VersionRecord/step``): from the nearest checkpoint before it
/// (or a file built earlier), the steps after it applied strictly in order by ``Materializer``, each checked by its
/// checksum, row counts and content digest, and the result checked against the version's recorded SHA-256 and size
/// before it is renamed into `cache` as `<sha256>.sqlite`. The publisher (a cold working copy), a server and a bucket
/// replica all build this way, so each serves exactly the bytes the publisher recorded.
///
/// ```swift
/// let builder = VersionBuilder(store: store, cache: cacheDirectory)
/// let file = try builder.file(of: entry.current, in: entry, manifest: manifest)
/// ```
public struct VersionBuilder: Sendable {
    public let store: any SnapshotStore
    /// Where built files live (`<sha256>.sqlite`) and where scratch files are made (`tmp/`).
    public let cache: URL

    public init(store: any SnapshotStore, cache: URL) {
        self.store = store
        self.cache = cache.standardizedFileURL
    }

    /// The built file of version `sha256` in the cache (it may not exist yet).
    public func builtURL(sha256: String) -> URL { cache.appendingPathComponent("\(sha256).sqlite") }

    /// The complete file of `record`, a retained version of `entry`: a checkpoint's own file in the store, a file
    /// built earlier, or one built now. Throws, naming the object, when a step is missing or damaged, a step does not
    /// fit, or the result is not the recorded file; the cache then holds nothing new.
    public func file(of record: VersionRecord, in entry: ScopeEntry, manifest: StoredManifest) throws -> URL {
        if record.isCheckpoint { return store.files(of: record, in: manifest).snapshot }
        if record.catchUpOnly == true { throw Self.catchUpOnly(record, dataset: manifest.dataset) }
        let built = builtURL(sha256: record.sha256)
        if FileManager.default.fileExists(atPath: built.path) { return built }
        guard var index = entry.retained.firstIndex(where: { $0.version == record.version }) else {
            throw FerryError(
                .store, "version \(record.version) is not retained",
                path: store.manifestURL(dataset: manifest.dataset).path)
        }
        var chain: [VersionRecord] = []
        var base: URL
        while true {
            let candidate = entry.retained[index]
            if candidate.isCheckpoint {
                base = store.files(of: candidate, in: manifest).snapshot
                break
            }
            if candidate.version != record.version,
                FileManager.default.fileExists(atPath: builtURL(sha256: candidate.sha256).path)
            {
                base = builtURL(sha256: candidate.sha256)
                break
            }
            chain.insert(candidate, at: 0)
            guard index > 0 else {
                throw FerryError(
                    .store, "version \(record.version) is stored as a step, but no checkpoint is retained before it",
                    path: store.manifestURL(dataset: manifest.dataset).path)
            }
            index -= 1
        }
        return try build(chain, from: base, baseRecord: entry.retained[index], dataset: manifest.dataset)
    }

    /// The error for a whole file of a version the history's tiers left as a catch-up point only.
    public static func catchUpOnly(_ record: VersionRecord, dataset: String) -> FerryError {
        FerryError(
            .notFound,
            "version \(record.version) of dataset '\(dataset)' is kept only as a point to catch up from: the history's tiers merged the steps before it, so its whole file is no longer published; fetch the latest snapshot"
        )
    }

    /// Applies `chain` to a copy of `base` (the file of `baseRecord`) and renames the verified result into the cache.
    private func build(_ chain: [VersionRecord], from base: URL, baseRecord: VersionRecord, dataset: String) throws
        -> URL
    {
        let target = chain[chain.count - 1]
        let tmp = cache.appendingPathComponent("tmp", isDirectory: true)
        try DurableFile.makeDirectory(tmp)
        let scratch = tmp.appendingPathComponent("\(target.sha256)-\(UUID().uuidString).sqlite")
        do {
            try FileClone.clone(
                base, to: scratch, "cannot copy version \(baseRecord.version) to build version \(target.version)",
                fix: "free space in \(cache.path)", durable: false)
            var digest = baseRecord.published.contentDigest
            for record in chain {
                guard let step = record.step else { continue }
                let changeset = try loadStep(step, dataset: dataset)
                do {
                    try Materializer.apply(changeset, to: scratch, expected: record.published, baseDigest: digest)
                } catch let error as FerryError {
                    throw FerryError(
                        .store,
                        "the step \(step.from)-\(step.to) (\(objectName(step))) does not build version \(record.version): \(error.message)",
                        path: store.patchURL(dataset: dataset, sha256: step.sha256).path)
                }
                digest = record.published.contentDigest
            }
            let sha256 = try FileDigest.sha256Hex(of: scratch)
            let size = try FileManager.default.attributesOfItem(atPath: scratch.path)[.size] as? NSNumber
            guard sha256 == target.sha256, size?.int64Value == target.size else {
                throw FerryError(
                    .store,
                    "version \(target.version) built from version \(baseRecord.version) and \(chain.count) steps has SHA-256 \(sha256), but its record says \(target.sha256): the steps were built by another SQLite, or the store is damaged",
                    path: store.manifestURL(dataset: dataset).path)
            }
            let built = builtURL(sha256: target.sha256)
            try DurableFile.rename(scratch, to: built)
            return built
        } catch {
            try? FileManager.default.removeItem(at: scratch)  // scratch of this call; the error says what failed
            throw error
        }
    }

    /// A step's changeset (or any stored patch's), after its size and SHA-256 match the record.
    public func loadStep(_ step: PatchRef, dataset: String) throws -> Changeset {
        let url = store.patchURL(dataset: dataset, sha256: step.sha256)
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            throw FerryError(
                .store,
                "the step \(step.from)-\(step.to) (\(objectName(step))) is missing: \(error.localizedDescription)",
                path: url.path)
        }
        guard Int64(data.count) == step.size, FileDigest.sha256Hex(bytes: [UInt8](data)) == step.sha256 else {
            throw FerryError(
                .store,
                "the step \(step.from)-\(step.to) (\(objectName(step))) does not match its checksum; version \(step.to) cannot be built",
                path: url.path)
        }
        var raw = Data()
        let inflater = try GzipInflater()
        try inflater.inflate(data) { piece in raw.append(contentsOf: piece) }
        try inflater.finish()
        return Changeset(data: raw)
    }

    private func objectName(_ step: PatchRef) -> String { "objects/\(step.sha256).patch.gz" }

    /// Removes the files (`<sha256>.*`) whose checksum `keeping` does not name, and leftover scratch files. Returns
    /// the count.
    @discardableResult
    public func prune(keeping: Set<String>) -> Int {
        var removed = 0
        let names = (try? FileManager.default.contentsOfDirectory(atPath: cache.path)) ?? []  // none built yet
        for name in names where name != "tmp" {
            let sha = String(name.prefix { $0 != "." })
            guard !keeping.contains(sha) else { continue }
            // A file another load still holds open stays readable; a failed removal is retried by the next prune.
            if (try? DurableFile.remove(cache.appendingPathComponent(name))) != nil { removed += 1 }
        }
        let tmp = cache.appendingPathComponent("tmp", isDirectory: true)
        // No tmp/ means nothing is left over.
        for name in (try? FileManager.default.contentsOfDirectory(atPath: tmp.path)) ?? [] {
            // A leftover of a killed build; a failed removal is retried next time.
            try? DurableFile.remove(tmp.appendingPathComponent(name))
        }
        return removed
    }
}
