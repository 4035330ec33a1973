import FerryCore
import FerryPublisher
import FerryS3
import FerryStore
import Foundation
import Logging

// Steps 2 and 6 of a bucket publish: the local cache in line with the bucket before the publish, and pruned after.
extension BucketPublisher {
    /// The cache's list of object digests (``CachedDigests``): `CACHE/DATASET/cached-digests.json`.
    static func digestsURL(cache: FileSnapshotStore, dataset: String) -> URL {
        cache.directory(dataset: dataset).appendingPathComponent("cached-digests.json")
    }

    /// Replaces the cache's manifest with the bucket's, and fetches what an incremental build and its patches read:
    /// each scope's current file (verified), its row index and the patches that led to it. Returns the cache's
    /// digests, with what this step hashed or downloaded.
    func syncCache(
        dataset: String, remote: StoredManifest?, cache: FileSnapshotStore, transfer: inout BucketTransfer
    ) async throws -> CachedDigests {
        let manifestURL = cache.manifestURL(dataset: dataset)
        let digestsURL = Self.digestsURL(cache: cache, dataset: dataset)
        var digests = try await ThreadJob.run(name: Self.lane) {
            try DurableFile.makeDirectory(cache.objectsDirectory(dataset: dataset))
            if let remote {
                // An unreadable cached manifest is replaced like a stale one: the bucket's is the truth.
                if (try? cache.storedManifest(for: dataset)) != remote {
                    try DurableFile.write(try remote.jsonData(), to: manifestURL)
                }
            } else if FileManager.default.fileExists(atPath: manifestURL.path) {
                // A bucket without the dataset: the cache starts afresh too.
                try DurableFile.remove(manifestURL)
            }
            return CachedDigests.load(from: digestsURL)
        }
        guard let remote else { return digests }
        var done: Set<String> = []
        for entry in remote.scopes {
            let current = entry.current
            guard done.insert(current.sha256).inserted else { continue }
            let version = "version \(current.version)\(entry.scope.map { " of scope \($0)" } ?? "")"
            if !current.isCheckpoint {
                // A version stored as a step: its checkpoint and the steps after it, which the publisher builds the
                // current file from (its row index is in no bucket: the next version is exported from scratch).
                try await fetchChain(
                    of: entry, dataset: dataset, cache: cache, digests: &digests, transfer: &transfer)
                continue
            }
            let snapshot = "\(current.sha256).sqlite"
            if !(try await fetch(
                dataset: dataset, name: snapshot, sha256: current.sha256, cache: cache, digests: &digests,
                transfer: &transfer))
            {
                transfer.notes.append(
                    "\(version): \(snapshot) is in neither the cache nor the bucket; building from scratch, "
                        + "without patches")
                continue
            }
            if !(try await fetch(
                dataset: dataset, name: "\(current.sha256).rows", sha256: nil, cache: cache, digests: &digests,
                transfer: &transfer))
            {
                transfer.notes.append(
                    "\(version): no row index (\(current.sha256).rows) in the bucket; building from scratch")
            }
            for patch in current.published.patches ?? [] {
                if !(try await fetch(
                    dataset: dataset, name: "\(patch.sha256).patch.gz", sha256: patch.sha256, cache: cache,
                    digests: &digests, transfer: &transfer))
                {
                    transfer.notes.append(
                        "patch \(patch.from)-\(patch.to) is not in the bucket; no patch from version \(patch.from)")
                }
            }
        }
        return digests
    }

    /// Fetches the objects that build `entry`'s current version: the last checkpoint's file and every step after it.
    func fetchChain(
        of entry: ScopeEntry, dataset: String, cache: FileSnapshotStore, digests: inout CachedDigests,
        transfer: inout BucketTransfer
    ) async throws {
        guard let start = entry.retained.lastIndex(where: \.isCheckpoint) else { return }
        for record in entry.retained[start...] {
            // The checkpoint's file, then each step after it.
            let (name, sha256) =
                record.isCheckpoint
                ? ("\(record.sha256).sqlite", record.sha256)
                : record.step.map { ("\($0.sha256).patch.gz", $0.sha256) } ?? ("\(record.sha256).sqlite", record.sha256)
            if !(try await fetch(
                dataset: dataset, name: name, sha256: sha256, cache: cache, digests: &digests, transfer: &transfer))
            {
                transfer.notes.append(
                    "\(name) (version \(record.version)) is in neither the cache nor the bucket; cutting a checkpoint")
            }
        }
    }

    /// Makes sure the cache holds object `name` (with SHA-256 `sha256` when given): keeps a good local copy (hashed
    /// only when `digests` has no digest for the file as it is now), else streams the bucket's into a temp file,
    /// verifies, fsyncs and renames it. False when the bucket has none.
    func fetch(
        dataset: String, name: String, sha256: String?, cache: FileSnapshotStore, digests: inout CachedDigests,
        transfer: inout BucketTransfer
    ) async throws -> Bool {
        let local = cache.objectsDirectory(dataset: dataset).appendingPathComponent(name)
        let known = digests
        let hashed = self.hashed
        let (present, checked) = try await ThreadJob.run(name: Self.lane) { () -> (Bool?, CachedDigests) in
            var checked = known
            guard FileManager.default.fileExists(atPath: local.path) else { return (nil, checked) }
            guard let sha256 else { return (true, checked) }
            return (try checked.sha256(of: local, name: name) { hashed?(name) } == sha256, checked)
        }
        digests = checked
        if present == true { return true }
        if present == false {
            logger.warning(
                "a cached object does not match its checksum; downloading it again", metadata: ["file": "\(local.path)"]
            )
        }
        let temp = cache.objectsDirectory(dataset: dataset).appendingPathComponent(".\(name).\(UUID().uuidString).tmp")
        let key = layout.objectKey(dataset: dataset, name: name)
        let got: S3Download
        do {
            got = try await s3.download(bucket: layout.bucket, key: key, to: temp)
            // The download hashed the bytes as they arrived: no second read of the file.
            if let sha256, got.sha256 != sha256 {
                throw FerryError(
                    .verification,
                    "s3://\(layout.bucket)/\(key) has SHA-256 \(got.sha256), not the \(sha256) its name promises: "
                        + "delete the object and publish with --full")
            }
        } catch {
            // The download's error is the one to report; a leftover temp file is pruned by this publish.
            _ = try? await ThreadJob.run(name: Self.lane) { try DurableFile.remove(temp) }
            if let error = error as? FerryError,
                (error.underlying as? S3ErrorResponse).map({ $0.status == 404 && $0.code != "NoSuchBucket" }) == true
            {
                return false  // the bucket has no such object (a missing bucket is an error)
            }
            throw error
        }
        let downloaded = digests
        digests = try await ThreadJob.run(name: Self.lane) {
            try DurableFile.rename(temp, to: local)
            var digests = downloaded
            if sha256 != nil { try digests.record(got.sha256, of: local, name: name) }
            return digests
        }
        transfer.downloaded += 1
        transfer.downloadedBytes += got.size
        return true
    }

    /// Removes from the cache the files the new manifest no longer names, and row indexes of versions no longer
    /// current: the cache holds what the next publish builds on. Then saves the cache's digests, with those of the
    /// files this publish stored (the store hashed them while storing them under their SHA-256).
    func pruneCache(dataset: String, manifest: StoredManifest, cache: FileSnapshotStore, digests: CachedDigests)
        async throws
    {
        let referenced = manifest.referencedObjects
        let current = Set(manifest.scopes.map(\.current.sha256))
        let directory = cache.objectsDirectory(dataset: dataset)
        let logger = self.logger
        try await ThreadJob.run(name: Self.lane) {
            var kept: Set<String> = []
            // The cache only: an unlistable directory keeps its files until the next publish.
            for name in (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? [] {
                let sha = name.split(separator: ".").first.map(String.init) ?? ""
                if name.hasPrefix(".") || !referenced.contains(sha)
                    || (name.hasSuffix(".rows") && !current.contains(sha))
                {
                    // The cache only: a file left behind is removed by the next publish.
                    try? FileManager.default.removeItem(at: directory.appendingPathComponent(name))
                } else {
                    kept.insert(name)
                }
            }
            var digests = digests
            for sha256 in current where digests.entries["\(sha256).sqlite"] == nil {
                let name = "\(sha256).sqlite"
                if kept.contains(name) {
                    try digests.record(sha256, of: directory.appendingPathComponent(name), name: name)
                }
            }
            digests.keep(only: kept)
            do {
                try digests.save()
            } catch {
                // The list only saves hashing: without it the next publish hashes the cached files once more.
                logger.warning("cannot save the cache's digests: \(error)", metadata: ["dataset": "\(dataset)"])
            }
        }
    }
}
