import Crypto
import FerryCore
import FerryStore
// Shared helpers for this target live in FerryTestSupport.
@_exported import FerryTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore

@testable import FerryServer

/// A real store in a temp dir, published to with FileSnapshotStore.commit exactly as the publisher does.
struct TestStore: Sendable {
    let directory: TemporaryDirectory
    let store: FileSnapshotStore

    init() throws {
        directory = try TemporaryDirectory("ferry-server")
        store = FileSnapshotStore(root: directory.url)
    }

    func remove() { directory.remove() }

    /// Publishes a new version of `dataset`: a real SQLite file with `rows` rows and `blobBytes` of random data
    /// (so sizes span several chunks when wanted), committed with `keep` versions retained.
    @discardableResult
    func publish(_ dataset: String = "trips", rows: Int = 20, blobBytes: Int = 0, keep: Int = 3) throws -> Manifest {
        let lock = try store.lock(dataset: dataset, wait: true)
        defer { lock.unlock() }
        try DurableFile.makeDirectory(store.temporaryDirectory(dataset: dataset))
        let url = store.temporaryDirectory(dataset: dataset).appendingPathComponent("\(UUID().uuidString).sqlite")
        let version = try store.nextVersion(dataset: dataset)
        do {
            let db = try SQLiteConnection(path: url.path)
            try db.execute("CREATE TABLE trips(id INTEGER PRIMARY KEY, name TEXT, blob BLOB)")
            try db.transaction {
                for i in 0..<rows {
                    _ = try db.run("INSERT INTO trips(name) VALUES (?)", [.text("v\(version) row \(i)")])
                }
                var remaining = blobBytes
                while remaining > 0 {
                    let n = min(remaining, 256 * 1024)
                    let random = FileHandle(forReadingAtPath: "/dev/urandom")!
                    let bytes = [UInt8](random.readData(ofLength: n))
                    try random.close()
                    _ = try db.run("INSERT INTO trips(name, blob) VALUES ('blob', ?)", [.blob(bytes)])
                    remaining -= n
                }
            }
        }
        return try store.commit(
            dataset: dataset, version: version, snapshot: url, schemaVersion: 1, tables: ["trips": rows],
            dataDigest: String(repeating: "a", count: 64), createdAt: Timestamp.format(Date()), keep: keep)
    }

    func snapshotBytes(_ dataset: String = "trips", version: Int) throws -> Data {
        try Data(contentsOf: store.snapshotURL(dataset: dataset, version: version))
    }

    func gzipBytes(_ dataset: String = "trips", version: Int) throws -> Data {
        try Data(contentsOf: store.gzipURL(dataset: dataset, version: version))
    }

    func configuration() -> ServerConfiguration {
        ServerConfiguration(storePath: store.root, port: 0, pollInterval: .milliseconds(100), chunkSize: 64 * 1024)
    }

    /// Runs `body` against the real server listening on a free port.
    func withLiveServer(
        _ configuration: ServerConfiguration? = nil,
        _ body: @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let app = try await buildApplication(configuration ?? self.configuration(), logger: logger)
        try await app.test(.live) { client in try await body(client) }
    }
}

func sha256Hex(_ buffer: ByteBuffer) -> String {
    SHA256.hash(data: Data(buffer.readableBytesView)).hex
}

func sha256Hex(_ data: Data) -> String { SHA256.hash(data: data).hex }

extension TestResponse {
    var bodyData: Data { Data(body.readableBytesView) }
    var bodyString: String { String(buffer: body) }
    func header(_ name: String) -> String? { headers[HTTPField.Name(name)!] }
}
