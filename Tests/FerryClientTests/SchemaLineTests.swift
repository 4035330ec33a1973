import FerryCore
import Foundation
import Testing

@testable import FerryClient

/// Schema lines on the client's download side (docs/client.md, "Schema lines"): the manifest request names the
/// accepted schema versions, the manifest's dataset may be a line of the configured one and then names every URL of
/// that version, a 410 is `schemaRetired` and keeps every local file, and every request carries `Ferry-Device`.
@Suite struct SchemaLineTests {
    static let server = URL(string: "http://127.0.0.1:8080/")!

    // MARK: URLs and names

    @Test func theManifestRequestNamesTheAcceptedSchemaVersionsInOrder() throws {
        var config = FerryClient.Configuration(
            directory: URL(fileURLWithPath: "/tmp/unused"), serverURL: Self.server, dataset: "trips")
        #expect(try config.manifestURL().absoluteString == "http://127.0.0.1:8080/v1/datasets/trips/manifest")
        config.acceptedSchemaVersions = [10, 2, 1]
        #expect(
            try config.manifestURL().absoluteString == "http://127.0.0.1:8080/v1/datasets/trips/manifest?schema=1,2,10")
        config.acceptedSchemaVersions = [2]
        #expect(try config.manifestURL().absoluteString.hasSuffix("/v1/datasets/trips/manifest?schema=2"))
    }

    @Test func theConfiguredDatasetIsABaseNameNeverALine() throws {
        let config = FerryClient.Configuration(
            directory: URL(fileURLWithPath: "/tmp/unused"), serverURL: Self.server, dataset: "trips.v2")
        let error = #expect(throws: FerryError.self) { try config.manifestURL() }
        #expect(error?.code == .badInput)
        #expect(error?.key == "dataset")
    }

    @Test func aNameIsTheDatasetOrOneOfItsLinesOfTheRightSchemaVersion() {
        #expect(DatasetName.names("trips", lineOf: "trips", schemaVersion: 3))
        #expect(DatasetName.names("trips.v2", lineOf: "trips", schemaVersion: 2))
        #expect(DatasetName.names("trips.v2", lineOf: "trips", schemaVersion: nil))
        #expect(!DatasetName.names("trips.v2", lineOf: "trips", schemaVersion: 1))
        #expect(!DatasetName.names("rides.v2", lineOf: "trips", schemaVersion: 2))
        #expect(!DatasetName.names("trips.v02", lineOf: "trips", schemaVersion: 2))
        #expect(!DatasetName.names("tripsx", lineOf: "trips", schemaVersion: nil))
    }

    static func manifest(_ dataset: String, schemaVersion: Int, version: Int = 1) -> Manifest {
        Manifest(
            dataset: dataset, version: version, sha256: String(repeating: "a", count: 64), size: 4096, gzipSize: 1024,
            createdAt: "2026-11-27T04:00:00.000Z", schemaVersion: schemaVersion, tables: ["trips": 3],
            versions: [version])
    }

    @Test func aManifestOfOneOfTheDatasetsLinesIsTaken() throws {
        let url = URL(string: "http://127.0.0.1:8080/v1/datasets/trips/manifest?schema=1,2")!
        func validated(_ manifest: Manifest) throws -> Manifest {
            try SnapshotDownloader.validated(try manifest.jsonData(), dataset: "trips", url: url)
        }
        #expect(try validated(Self.manifest("trips", schemaVersion: 1)).dataset == "trips")
        #expect(try validated(Self.manifest("trips.v2", schemaVersion: 2)).dataset == "trips.v2")
        // A line whose number is not its schema version, or another dataset's line, is the existing error.
        for wrong in [Self.manifest("trips.v2", schemaVersion: 1), Self.manifest("rides.v2", schemaVersion: 2)] {
            let error = #expect(throws: FerryError.self) { try validated(wrong) }
            #expect(error?.code == .verification)
        }
    }

    @Test func aPatchIsTakenOnlyFromAFileOfTheManifestsOwnLine() {
        var manifest = Self.manifest("trips.v2", schemaVersion: 2, version: 5)
        let base = String(repeating: "b", count: 64)
        manifest.current.patches = [
            PatchRef(from: 4, to: 5, size: 10, sha256: String(repeating: "c", count: 64), base: base)
        ]
        func patchBase(_ dataset: String?) -> SnapshotDownloader.PatchBase {
            SnapshotDownloader.PatchBase(
                file: URL(fileURLWithPath: "/tmp/unused/database.db"),
                info: SnapshotInfo(sha256: base, version: 4, schemaVersion: 2, dataset: dataset))
        }
        func choose(_ dataset: String?, in manifest: Manifest) -> PatchRef? {
            SnapshotDownloader.choosePatch(manifest, base: patchBase(dataset), dataset: "trips", accepted: [1, 2])
        }
        #expect(choose("trips.v2", in: manifest)?.from == 4)
        // The held file is the single-template dataset (or a file from before lines): another line, a full download.
        #expect(choose("trips", in: manifest) == nil)
        #expect(choose(nil, in: manifest) == nil)
        // A file without a recorded dataset is of the configured dataset, as before lines.
        manifest.dataset = "trips"
        #expect(choose(nil, in: manifest)?.from == 4)
        #expect(choose("trips.v2", in: manifest) == nil)
    }

    // MARK: 410

    @Test func aRetiredAnswerIsSchemaRetiredWithTheServersMessage() async throws {
        let body = Data(
            #"{"error":{"code":"gone","message":"schema line 1 of dataset 'trips' is retired; lines served: 2"}}"#.utf8)
        let sent = Locked(false)
        let stream = TransportResponseBody {
            sent.withLock { done in
                defer { done = true }
                return done ? nil : body
            }
        }
        let error = await SchemaRetired.error(
            dataset: "trips", url: URL(string: "http://h/v1/datasets/trips/manifest?schema=1")!, body: stream)
        #expect(error.code == .schemaRetired)
        #expect(error.code.rawValue == "schema-retired")
        #expect(error.message.hasPrefix("this app build is too old for dataset 'trips': update the app"))
        #expect(error.message.contains("lines served: 2"))
        #expect(error.message.contains("are kept"))
    }

    // MARK: Ferry-Device

    @Test func theDeviceIDIsMadeOnceAndReadBack() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let config = FerryClient.Configuration(directory: dir.url)
        let first = try await FerryClient.open(configuration: config, logger: .test)
        // The open itself writes nothing: the id is made when the directory first needs it.
        let file = dir.appending(".ferry/client-id")
        #expect(!FileManager.default.fileExists(atPath: file.path))
        // Concurrent first requests share the one id made.
        async let one = first.deviceID()
        async let other = first.deviceID()
        let id = try await one
        #expect(try await other == id)
        #expect(try await first.deviceID() == id)
        await first.close()
        #expect(UUID(uuidString: id) != nil)
        #expect(String(decoding: try Data(contentsOf: file), as: UTF8.self) == id)
        // No temp file is left beside it.
        let names = try FileManager.default.contentsOfDirectory(atPath: dir.appending(".ferry").path)
        #expect(!names.contains { $0.hasSuffix(".tmp") })

        let second = try await FerryClient.open(configuration: config, logger: .test)
        #expect(try await second.deviceID() == id)
        await second.close()

        // A file that holds no UUID (damaged) is replaced by a new id, written durably.
        try Data("not an id".utf8).write(to: file)
        let third = try await FerryClient.open(configuration: config, logger: .test)
        let replaced = try await third.deviceID()
        #expect(replaced != id && UUID(uuidString: replaced) != nil)
        #expect(String(decoding: try Data(contentsOf: file), as: UTF8.self) == replaced)
        await third.close()
    }
}
