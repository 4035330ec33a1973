import FerryCore
import Foundation

extension SnapshotDownloader {
    /// The most a manifest may weigh; a real one is well under a kilobyte per retained version.
    static let manifestLimit = 4 << 20

    /// `GET …/DATASET/manifest?schema=…` with `If-None-Match` carrying `knownChecksums` (the manifest's ETag is
    /// `"<sha256>"` of the latest snapshot, the same tag as the snapshot's): nil on 304, else the manifest, checked to
    /// belong to this dataset or one of its schema lines. The manifest is `Cache-Control: no-cache`: a cache may keep
    /// it but must revalidate it every time, so this request always reaches the server (or a cache that asks it).
    /// A 410 (every accepted line retired) is ``FerryError/Code/schemaRetired``.
    func revalidateManifest(knownChecksums: [String]) async throws -> Manifest? {
        var headers = try await requestHeaders(["Accept": "application/json"])
        if !knownChecksums.isEmpty {
            headers["If-None-Match"] = knownChecksums.map { "\"\($0)\"" }.joined(separator: ", ")
        }
        var timeout: Duration?
        if let seconds = ManifestPacing.waitSeconds(waitForChanges) {
            headers["Prefer"] = "wait=\(seconds)"
            // The server sends nothing until a version lands or the wait ends: the timeout must outlast it.
            timeout = .seconds(seconds + 30)
        }
        let url = manifestURL
        let pacing = manifestPacing
        return try await transport.send(TransportRequest(url: url, headers: headers, timeout: timeout)) {
            head, body -> Manifest? in
            pacing.withLock { $0 = ManifestPacing(head) }
            switch head.status {
            case 304:
                return nil
            case 410:
                throw await SchemaRetired.error(dataset: dataset, url: url, body: body)
            case 404 where streamPath.isEmpty:
                throw await Self.notServed(dataset: dataset, head: head, url: url, body: body)
            case 200:
                var data = Data()
                do {
                    for try await chunk in body {
                        data.append(chunk)
                        guard data.count <= Self.manifestLimit else {
                            throw FerryError(
                                .corruptTransfer,
                                "the manifest at \(url.absoluteString) is larger than \(Self.manifestLimit) bytes; is Configuration.serverURL a Ferry server?"
                            )
                        }
                    }
                } catch let error as FerryError {
                    throw error
                } catch {
                    throw FerryError(
                        .offline,
                        "the manifest from \(url.absoluteString) broke off (\(error)); offline is normal: the app keeps using database.db, try again later"
                    )
                }
                return try Self.validated(data, dataset: dataset, url: url)
            default:
                throw ResponsePlan.failure(head, url: url.absoluteString)
            }
        }
    }

    /// Decodes a manifest body and checks that it describes a version of `dataset` the client can ask for: its
    /// `dataset` is `dataset` itself or a schema line of it whose number is the manifest's `schemaVersion`.
    static func validated(_ data: Data, dataset: String, url: URL) throws -> Manifest {
        let manifest: Manifest
        do {
            manifest = try Manifest.decode(data)
        } catch {
            if data.prefix(512).contains(UInt8(ascii: "<"))
                && String(decoding: data.prefix(512), as: UTF8.self).lowercased().contains("<html")
            {
                throw FerryError(
                    .offline,
                    "\(url.absoluteString) answered with a web page instead of a Ferry manifest: a captive portal or a proxy's sign-in page? Sign in to the network, then fetch again; database.db is unchanged",
                    underlying: error)
            }
            throw FerryError(
                .corruptTransfer,
                "\(url.absoluteString) did not answer with a Ferry manifest (\(error)); is Configuration.serverURL a Ferry server?",
                underlying: error)
        }
        guard DatasetName.names(manifest.dataset, lineOf: dataset, schemaVersion: manifest.schemaVersion) else {
            throw FerryError(
                .verification,
                "the server's manifest is of dataset '\(manifest.dataset)', not '\(dataset)'; check the server's store",
                key: "dataset")
        }
        guard manifest.version >= 1, SHA256Hex.isValid(manifest.sha256), manifest.size > 0 else {
            throw FerryError(
                .corruptTransfer,
                "the manifest at \(url.absoluteString) names no usable version (version \(manifest.version)); check the server's store"
            )
        }
        return manifest
    }
}
