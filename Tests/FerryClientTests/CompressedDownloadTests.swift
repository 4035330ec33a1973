import FerryClientNIO
import FerryCore
import FerryStore
import Foundation
import Testing

@testable import FerryClient

/// The download flow against the real server, watched on the wire (``WireRecorder``): the manifest is revalidated,
/// the new version comes from its immutable URL as gzip, is inflated and verified by the SQLite file's SHA-256, and a
/// cut download resumes with `Range` + `If-Range` on the gzip copy. The gzip tests run on AsyncHTTPClient, the
/// transport that carries the gzip copy as it is; URLSession asks for the SQLite file itself, and its last test
/// checks that on the wire.
@Suite struct CompressedDownloadTests {
    struct Setup {
        let temp: TemporaryDirectory
        let fixtures: SnapshotFixtures
        let dir: ClientDirectory

        init() throws {
            temp = try TemporaryDirectory("ferry-gzip")
            fixtures = SnapshotFixtures(root: temp.appending("store"))
            dir = ClientDirectory(temp.appending("client"))
        }

        func open(_ url: URL, _ kind: TransportKind = .asyncHTTPClient) async throws -> FerryClient {
            try await FerryClient.open(
                configuration: .init(directory: dir.url, serverURL: url, dataset: fixtures.dataset).using(kind.shared),
                logger: .test)
        }

        /// Checks `file` is byte for byte the published object of `manifest`.
        func expectPublished(_ file: URL, _ manifest: Manifest, sourceLocation: SourceLocation = #_sourceLocation)
            throws
        {
            #expect(try FileDigest.sha256Hex(of: file) == manifest.sha256, sourceLocation: sourceLocation)
            #expect(
                try Data(contentsOf: file) == Data(contentsOf: fixtures.snapshotFile(manifest.version)),
                sourceLocation: sourceLocation)
        }

        func expectNoPartial(sourceLocation: SourceLocation = #_sourceLocation) {
            for file in [dir.partial, dir.partialGzip, dir.partialRecord] {
                #expect(!dir.exists(file), "\(file.lastPathComponent)", sourceLocation: sourceLocation)
            }
        }
    }

    func fetchError(_ client: FerryClient) async -> FerryError? {
        do {
            _ = try await client.checkForUpdates()
            return nil
        } catch let error as FerryError {
            return error
        } catch {
            Issue.record("unexpected \(error)")
            return nil
        }
    }

    @Test func newVersionComesFromItsVersionURLAsGzipAndARevalidationMovesNoSnapshotByte() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let v1 = try setup.fixtures.publish(rows: 5)
        try await withRecordedFerryServer(store: setup.fixtures.store.root) { url, recorder, refresh in
            let client = try await setup.open(url)
            #expect(try await client.checkForUpdates().outcome == .initialSync)

            // Given version 2 with 2 MiB of compressible data on the server
            let v2 = try setup.fixtures.publish(rows: 6, textMiB: 2)
            try await refresh()
            #expect(v2.gzipSize < v2.size * 2 / 3)
            await recorder.log.reset()

            // When the client checks
            let result = try await client.checkForUpdates()

            // Then it revalidated the manifest with the live checksum, then fetched /versions/2 as gzip
            let exchanges = await recorder.log.exchanges
            #expect(exchanges.map(\.path) == ["/v1/datasets/trips/manifest", "/v1/datasets/trips/versions/2"])
            #expect(exchanges[0].ifNoneMatch == "\"\(v1.sha256)\"" && exchanges[0].status == 200)
            let download = exchanges[1]
            #expect(download.acceptEncoding == "gzip")
            #expect(download.range == nil && download.ifRange == nil)
            #expect(download.status == 200)
            #expect(download.contentEncoding == "gzip")
            #expect(download.etag == "\"\(v2.sha256)-gzip\"")
            #expect(download.bodyIsGzip)
            #expect(Int64(download.bodyBytes) == v2.gzipSize)

            // And the result counts wire and file bytes apart; updated.db is the published file, byte for byte
            #expect(
                result.outcome == .updateDownloaded && result.download?.version == 2
                    && result.download?.sha256 == v2.sha256)
            #expect(result.download?.encoding == .gzip)
            #expect(result.bytesReceived == v2.gzipSize && result.check.resumedFrom == 0)
            #expect(result.download?.fileBytes == v2.size)
            try setup.expectPublished(setup.dir.updated, v2)
            setup.expectNoPartial()

            // When the client checks again: the manifest answers 304 to the pending checksum; no snapshot byte moves
            await recorder.log.reset()
            let again = try await client.checkForUpdates()
            let second = await recorder.log.exchanges
            #expect(second.count == 1)
            #expect(second.first?.path == "/v1/datasets/trips/manifest")
            #expect(second.first?.ifNoneMatch == "\"\(v2.sha256)\"")
            #expect(second.first?.status == 304 && second.first?.bodyBytes == 0)
            #expect(
                again.outcome == .notModified && again.bytesReceived == 0 && again.download == nil)
            await client.close()
        }
    }

    @Test func aCutGzipDownloadResumesWithRangeAndIfRangeOnTheGzipETag() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        try setup.fixtures.publish(rows: 5)
        try await withRecordedFerryServer(store: setup.fixtures.store.root) { url, recorder, refresh in
            let client = try await setup.open(url)
            #expect(try await client.checkForUpdates().outcome == .initialSync)
            let v2 = try setup.fixtures.publish(rows: 6, textMiB: 3)
            try await refresh()

            // Given a download of version 2 whose connection breaks after a third of the gzip copy
            await recorder.log.cutNextSnapshotBody(after: Int(v2.gzipSize / 3))
            let error = await fetchError(client)
            #expect(error?.code == .offline)
            let cut = try #require(await recorder.log.snapshotExchanges.last)
            #expect(cut.cut && cut.contentEncoding == "gzip")

            // Then the compressed prefix and a record naming the version URL and the gzip representation are kept
            // (what reached the client before the connection dropped: at most what the server wrote)
            let kept = try #require(FileIdentity.size(of: setup.dir.partialGzip))
            #expect(kept > 0 && kept <= Int64(cut.bodyBytes) && kept < v2.gzipSize)
            let record = try JSONDecoder().decode(PartialRecord.self, from: Data(contentsOf: setup.dir.partialRecord))
            #expect(record.expected == ExpectedSnapshot(sha256: v2.sha256, size: v2.size, version: 2))
            #expect(
                record.source
                    == TransferSource(
                        url: "\(url.absoluteString)/v1/datasets/trips/versions/2", encoding: .gzip, size: v2.gzipSize,
                        etag: "\"\(v2.sha256)-gzip\""))
            #expect(!setup.dir.exists(setup.dir.updated))

            // When the client checks again
            let result = try await client.checkForUpdates()

            // Then it asked the same version URL for the rest of the gzip copy, validated by its strong ETag
            let resume = try #require(await recorder.log.snapshotExchanges.last)
            #expect(resume.path == "/v1/datasets/trips/versions/2")
            #expect(resume.acceptEncoding == "gzip")
            #expect(resume.range == "bytes=\(kept)-")
            #expect(resume.ifRange == "\"\(v2.sha256)-gzip\"")
            #expect(resume.status == 206)
            #expect(resume.contentEncoding == "gzip")
            #expect(resume.contentRange == "bytes \(kept)-\(v2.gzipSize - 1)/\(v2.gzipSize)")
            #expect(Int64(resume.bodyBytes) == v2.gzipSize - kept)

            // And updated.db is the published file, byte for byte
            #expect(result.outcome == .updateDownloaded && result.download?.version == 2)
            #expect(result.check.resumedFrom == kept && result.bytesReceived == v2.gzipSize - kept)
            #expect(result.download?.fileBytes == v2.size && result.download?.encoding == .gzip)
            try setup.expectPublished(setup.dir.updated, v2)
            setup.expectNoPartial()
            await client.close()
        }
    }

    /// The If-Range mismatch case: the prefix is of the gzip copy, but the server (here: another one, serving the same
    /// store without gzip copies) now selects the SQLite file, so `If-Range: "<sha256>-gzip"` does not match and it
    /// answers 200 with the whole file. The client starts over cleanly, and an identity-only server is fine.
    @Test func aChangedRepresentationBetweenAttemptsRestartsCleanly() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let v1 = try setup.fixtures.publish(rows: 5)
        let v2 = try await withRecordedFerryServer(store: setup.fixtures.store.root) { url, recorder, refresh in
            let client = try await setup.open(url)
            #expect(try await client.checkForUpdates().outcome == .initialSync)
            let v2 = try setup.fixtures.publish(rows: 6, textMiB: 2)
            try await refresh()
            await recorder.log.cutNextSnapshotBody(after: Int(v2.gzipSize / 2))
            #expect(await fetchError(client)?.code == .offline)
            await client.close()
            return v2
        }
        let kept = try #require(FileIdentity.size(of: setup.dir.partialGzip))
        for version in [v1, v2] {
            try FileManager.default.removeItem(
                at: setup.fixtures.store.gzipURL(dataset: "trips", version: version.version))
        }

        try await withRecordedFerryServer(store: setup.fixtures.store.root) { url, recorder, _ in
            let client = try await setup.open(url)
            let result = try await client.checkForUpdates()
            await client.close()

            let download = try #require(await recorder.log.snapshotExchanges.last)
            #expect(download.path == "/v1/datasets/trips/versions/2")
            #expect(download.range == "bytes=\(kept)-" && download.ifRange == "\"\(v2.sha256)-gzip\"")
            #expect(download.status == 200 && download.contentEncoding == nil && download.contentRange == nil)
            #expect(Int64(download.bodyBytes) == v2.size)
            #expect(result.outcome == .updateDownloaded && result.check.resumedFrom == 0)
            #expect(
                result.download?.encoding == .identity && result.bytesReceived == v2.size
                    && result.download?.fileBytes == v2.size)
            try setup.expectPublished(setup.dir.updated, v2)
            setup.expectNoPartial()
        }
    }

    /// A newer version published between two attempts: the kept prefix is of the old version, so it is dropped and
    /// the new version downloaded from byte 0 (no Range is sent for another version's bytes).
    @Test func aNewVersionBetweenAttemptsRestartsCleanly() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        try setup.fixtures.publish(rows: 5)
        try await withRecordedFerryServer(store: setup.fixtures.store.root) { url, recorder, refresh in
            let client = try await setup.open(url)
            #expect(try await client.checkForUpdates().outcome == .initialSync)
            let v2 = try setup.fixtures.publish(rows: 6, textMiB: 2)
            try await refresh()
            await recorder.log.cutNextSnapshotBody(after: Int(v2.gzipSize / 2))
            #expect(await fetchError(client)?.code == .offline)
            #expect(setup.dir.exists(setup.dir.partialGzip))

            let v3 = try setup.fixtures.publish(rows: 7, textMiB: 1)
            try await refresh()
            let result = try await client.checkForUpdates()
            let download = try #require(await recorder.log.snapshotExchanges.last)
            #expect(download.path == "/v1/datasets/trips/versions/3")
            #expect(download.range == nil && download.ifRange == nil)
            #expect(download.status == 200 && download.contentEncoding == "gzip")
            #expect(
                result.outcome == .updateDownloaded && result.download?.version == 3 && result.check.resumedFrom == 0)
            try setup.expectPublished(setup.dir.updated, v3)
            setup.expectNoPartial()
            await client.close()
        }
    }

    /// The server's gzip copy is damaged (one byte flipped on disk): inflating fails, nothing is installed, the
    /// partial download is discarded, and the error says what happened.
    @Test func aCorruptGzipStreamLeavesNoUpdateAndAClearError() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        let v1 = try setup.fixtures.publish(rows: 5)
        let v2 = try setup.fixtures.publish(rows: 6, textMiB: 2)
        let gz = try setup.fixtures.store.gzipURL(dataset: "trips", version: 2)
        var bytes = try Data(contentsOf: gz)
        bytes[bytes.count / 2] ^= 0x55
        try bytes.write(to: gz)
        try setup.dir.create()
        try FileManager.default.copyItem(at: setup.fixtures.snapshotFile(1), to: setup.dir.database)

        try await withRecordedFerryServer(store: setup.fixtures.store.root) { url, recorder, _ in
            let client = try await setup.open(url)
            let error = await fetchError(client)
            await client.close()
            #expect(error?.code == .corruptTransfer)
            #expect(error?.message.contains("gzip") == true, "\(error?.message ?? "")")
            #expect(await recorder.log.snapshotExchanges.last?.contentEncoding == "gzip")
            #expect(!setup.dir.exists(setup.dir.updated))
            setup.expectNoPartial()
            #expect(try publishedVersion(of: setup.dir.database, among: [v1, v2]) == 1)
        }
    }

    /// URLSession would inflate the gzip copy itself, so ``URLSessionTransport`` asks for the SQLite file
    /// (`Accept-Encoding: identity`), and a cut download resumes on it with `Range` + `If-Range` on its own ETag.
    @Test func urlSessionAsksForTheFileItselfAndResumesItWithRangeAndIfRange() async throws {
        let setup = try Setup()
        defer { setup.temp.remove() }
        try setup.fixtures.publish(rows: 5)
        try await withRecordedFerryServer(store: setup.fixtures.store.root) { url, recorder, refresh in
            let client = try await setup.open(url, .urlSession)
            #expect(try await client.checkForUpdates().outcome == .initialSync)
            let v2 = try setup.fixtures.publish(rows: 6, textMiB: 3)
            try await refresh()

            // Given a download of version 2 whose connection breaks after a third of the file
            await recorder.log.cutNextSnapshotBody(after: Int(v2.size / 3))
            let error = await fetchError(client)
            #expect(error?.code == .offline)
            let cut = try #require(await recorder.log.snapshotExchanges.last)
            #expect(cut.cut && cut.acceptEncoding == "identity" && cut.contentEncoding == nil)

            // Then the prefix of the file itself is kept
            let kept = try #require(FileIdentity.size(of: setup.dir.partial))
            #expect(kept > 0 && kept <= Int64(cut.bodyBytes) && kept < v2.size)
            #expect(!setup.dir.exists(setup.dir.partialGzip))

            // When the client checks again, it asks for the rest of the file, validated by its strong ETag
            let result = try await client.checkForUpdates()
            let resume = try #require(await recorder.log.snapshotExchanges.last)
            #expect(resume.path == "/v1/datasets/trips/versions/2")
            #expect(resume.acceptEncoding == "identity")
            #expect(resume.range == "bytes=\(kept)-")
            #expect(resume.ifRange == TransferSource.etag(sha256: v2.sha256, encoding: .identity))
            #expect(resume.status == 206 && resume.contentEncoding == nil)
            #expect(Int64(resume.bodyBytes) == v2.size - kept)

            // And updated.db is the published file, byte for byte
            #expect(result.outcome == .updateDownloaded && result.download?.version == 2)
            #expect(result.check.resumedFrom == kept && result.bytesReceived == v2.size - kept)
            #expect(result.download?.fileBytes == v2.size && result.download?.encoding == .identity)
            try setup.expectPublished(setup.dir.updated, v2)
            setup.expectNoPartial()
            await client.close()
        }
    }
}
