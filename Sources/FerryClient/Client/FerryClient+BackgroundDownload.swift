import FerryCore
import Foundation
import Logging

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Downloads the app runs itself (a background `URLSession` on Apple platforms) and hands to Ferry afterwards. The
/// session and its delegate are the app's: this is the part Ferry needs, and it is platform-neutral, so the same
/// calls work (and are tested) with any download that ends in a file. See docs/app.md, "Background downloads".
extension FerryClient {
    /// Revalidates the manifest as ``checkForUpdates(progress:)`` does (`If-None-Match` with the pending, else the
    /// live checksum, plus refused ones; `Retry-After` honoured within `Configuration.download.retryAfterLimit`) and returns
    /// the version it names when this directory does not hold it yet; nil when there is nothing new. Downloads nothing.
    ///
    /// ```swift
    /// guard let download = try await client.prepareBackgroundDownload() else { return }  // up to date
    /// ```
    public func prepareBackgroundDownload() async throws -> BackgroundDownload? {
        let downloader = try await makeDownloader()
        let dataset = downloader.dataset
        let known = try await exclusively {
            try await onFiles { files, state in
                try files.checkDataset(dataset, &state)
                return try files.knownChecksums(&state)
            }
        }
        let manifest = try await downloader.honouringRetryAfter {
            try await downloader.revalidateManifest(knownChecksums: known)
        }
        // A cache in between that dropped If-None-Match still cannot make the app download what it has.
        guard let manifest, !known.contains(manifest.sha256) else {
            return nil
        }
        return BackgroundDownload(
            manifest: manifest, url: downloader.versionURL(manifest.version, line: manifest.dataset))
    }

    /// The request for a background session's download task of `download`: its version URL, `Accept-Encoding:
    /// identity` (the file must be the SQLite file itself, which the manifest's checksum covers, not a gzip body a
    /// session may or may not have inflated), `Ferry-Device` and the access token from
    /// ``Configuration/tokenProvider``, asked now.
    ///
    /// ```swift
    /// let task = backgroundSession.downloadTask(with: try await client.backgroundRequest(for: download))
    /// ```
    public func backgroundRequest(for download: BackgroundDownload) async throws -> URLRequest {
        var request = URLRequest(url: download.url)
        request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        let common = try await BearerAuthorization.commonHeaders(
            device: try await deviceID(), provider: configuration.tokenProvider)
        for (name, value) in common { request.setValue(value, forHTTPHeaderField: name) }
        return request
    }

    /// Takes the file a download of `download` wrote (the app moves a background session's file out of its temporary
    /// place first, as URLSession requires) and verifies it as every download is verified: the manifest's SHA-256
    /// and size, the SQLite header, `PRAGMA quick_check`, the `ferry_snapshot` row's dataset and version, and the
    /// accepted schema versions. A verified file becomes `database.db` on the initial sync, else `updated.db`, exactly
    /// as after ``checkForUpdates(progress:)`` (with FerryGRDB it is applied as that would be), and the manifest's
    /// content digest is kept for the next row-level patch. The file is moved into the client directory and is
    /// Ferry's from then on: one that fails verification is deleted, with the error thrown
    /// (`checksum-mismatch`, `corrupt-transfer`, `not-sqlite`, `verification` or `schema-version`, saying what was
    /// wrong), and nothing else in the directory changes. A version the directory already holds, an older one (a
    /// download that finished after a newer version arrived) or one refused by a rollback changes nothing either
    /// (``FetchResult/Outcome/notModified``).
    ///
    /// ```swift
    /// let result = try await client.adoptBackgroundDownload(download, file: keptFile)
    /// if result.outcome == .updateDownloaded { try await client.applyPendingUpdate() }
    /// ```
    public func adoptBackgroundDownload(_ download: BackgroundDownload, file: URL) async throws -> FetchResult {
        let dataset = try configuration.datasetURL().1
        let manifest = download.manifest
        guard DatasetName.names(manifest.dataset, lineOf: dataset, schemaVersion: manifest.schemaVersion) else {
            throw FerryError(
                .badInput,
                "the background download is of dataset '\(manifest.dataset)', but this client syncs '\(dataset)'; nothing was changed",
                path: file.path)
        }
        let directory = self.directory
        let accepted = configuration.acceptedSchemaVersions
        let scratch = directory.adopted()
        // Verified outside `exclusively`, as a download is: the app keeps using database.db meanwhile.
        let outcome = try await BlockingWork.run {
            try Self.verifyAdopted(
                file, as: scratch, in: directory, manifest: manifest, dataset: dataset, accepted: accepted)
        }
        do {
            return try await exclusively {
                let (known, held) = try await onFiles { files, state -> ([String], Int?) in
                    try files.checkDataset(dataset, &state)
                    let versions = try [files.directory.database, files.directory.updated].compactMap {
                        try files.directory.info(of: $0, state: &state)?.version
                    }
                    return (try files.knownChecksums(&state), versions.max())
                }
                // A download that finished late (a newer version arrived meanwhile, or this one was rolled back) is
                // verified but not installed: the directory never goes back to an older or refused version.
                if case .downloaded(let verified) = outcome, let version = verified.info.version,
                    known.contains(verified.info.sha256) || version < (held ?? 0)
                {
                    try? FileManager.default.removeItem(at: scratch)  // of no use; a leftover is removed on open
                    logger.notice(
                        "a background download is not newer than what the directory holds; not installed",
                        metadata: ["version": "\(version)", "held": "\(held ?? 0)"])
                    return try await install(.notModified)
                }
                return try await install(outcome)
            }
        } catch {
            // not installed, so of no use; a leftover is removed on open
            try? FileManager.default.removeItem(at: scratch)
            throw error
        }
    }

    /// Moves a background download to `scratch` in the client directory and verifies it against `manifest`: a
    /// refused schema version is removed and reported as `.refused`, a file that fails verification is removed and
    /// its error thrown.
    private static func verifyAdopted(
        _ file: URL, as scratch: URL, in directory: ClientDirectory, manifest: Manifest,
        dataset: String, accepted: Set<Int>?
    ) throws -> SnapshotDownloader.Outcome {
        try directory.create()
        do {
            try FileManager.default.moveItem(at: file, to: scratch)
        } catch {
            throw FerryError(
                .io,
                "cannot move the background download into the client directory: \(error.localizedDescription); nothing was changed",
                path: file.path, underlying: error)
        }
        do {
            try DurableFile.sync(scratch)
            let sha256 = try FileDigest.sha256Hex(of: scratch)
            let expected = ExpectedSnapshot(sha256: manifest.sha256, size: manifest.size, version: manifest.version)
            let info = try SnapshotVerifier.verify(
                file: scratch, expected: expected, computedSHA256: sha256, dataset: dataset, line: manifest.dataset)
            if let refusal = SnapshotVerifier.schemaRefusal(info, accepted: accepted, file: scratch) {
                try? FileManager.default.removeItem(at: scratch)  // refused for good; a leftover is removed on open
                return .refused(info, refusal)
            }
            let size = FileIdentity.size(of: scratch)
            var stats = TransferStats(bytesReceived: size ?? 0, resumedFrom: 0, fileBytes: size, encoding: .identity)
            stats.publishedBytes = manifest.size
            return .downloaded(
                SnapshotDownloader.Verified(
                    info: info, stats: stats, file: scratch, path: .full, contentDigest: manifest.contentDigest))
        } catch var error as FerryError {
            // the error is what matters; a leftover is removed on open
            try? FileManager.default.removeItem(at: scratch)
            error.message = "the background download of version \(manifest.version) was not adopted: \(error.message)"
            throw error
        } catch {
            try? FileManager.default.removeItem(at: scratch)  // as above
            throw error
        }
    }

    /// The downloader of ``checkForUpdates(progress:)`` and ``prepareBackgroundDownload()``, with this client's
    /// configuration.
    func makeDownloader() async throws -> SnapshotDownloader {
        let (url, dataset) = try configuration.datasetURL()
        var downloader = SnapshotDownloader(
            directory: directory, transport: transport, datasetsURL: url, dataset: dataset,
            acceptedSchemaVersions: configuration.acceptedSchemaVersions,
            writeBufferSize: configuration.download.writeBufferSize,
            maxBytesPerSecond: configuration.download.maxBytesPerSecond, tokenProvider: configuration.tokenProvider,
            logger: logger)
        downloader.retryAfterLimit = configuration.download.retryAfterLimit
        downloader.waitForChanges = configuration.download.waitForChanges
        downloader.startsFromCheckpoints = configuration.download.usePatches
        downloader.streamPath = configuration.streamPath
        downloader.deviceID = try await deviceID()
        return downloader
    }
}
