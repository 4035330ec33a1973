import FerryCore
import FerryStore
import Foundation
import Logging

@testable import FerryPostgres
@testable import FerryPublisher

/// A fresh PostgreSQL database, a temp dir with a store, and helpers to write templates and publish.
struct PublisherFixture {
    let database: TestDatabase
    let directory: TemporaryDirectory
    var store: URL { directory.appending("store") }
    var storeAccess: FileSnapshotStore { FileSnapshotStore(root: store) }

    init(_ label: String, sql: String = "") throws {
        database = try TestDatabase.create(label)
        directory = try TemporaryDirectory("ferry-\(label)")
        if !sql.isEmpty { try database.connect().execute(sql) }
    }

    func cleanUp() {
        database.drop()
        directory.remove()
    }

    /// Writes a template file into the temp dir and returns its path.
    @discardableResult
    func writeTemplate(_ yaml: String, name: String = "template.yml") throws -> String {
        let url = directory.appending(name)
        try yaml.write(to: url, atomically: true, encoding: .utf8)
        return url.path
    }

    /// A publisher into the fixture's store; `checkpointAt` 0 stores every version in full (each a checkpoint), and
    /// `history: false` keeps no patch history beyond `keep` (`--patch-horizon 0`).
    func publisher(
        template: String, keep: Int = 5, waitForLock: Bool = false, url: String? = nil, checkpointAt: Double = 0.25,
        history: Bool = true
    ) -> Publisher {
        var configuration = Publisher.Configuration(
            templatePath: template, databaseURL: url ?? database.url, store: store, keep: keep,
            waitForLock: waitForLock)
        configuration.checkpointAt = checkpointAt
        if !history { configuration.patchHorizon = .zero }
        return Publisher(configuration: configuration, logger: Logger(label: "test"))
    }

    func publish(template: String, keep: Int = 5, checkpointAt: Double = 0.25, history: Bool = true) throws
        -> PublishResult
    {
        try publisher(template: template, keep: keep, checkpointAt: checkpointAt, history: history).publishBlocking()
    }

    /// Publishes on the publisher's own thread, off the test's cooperative thread (for large tables).
    func publishOffPool(template: String, keep: Int = 5) async throws -> PublishResult {
        try await publisher(template: template, keep: keep).publish()
    }

    /// Opens a published version read-only.
    func open(dataset: String, version: Int) throws -> SQLiteConnection {
        try SQLiteConnection(path: storeAccess.snapshotURL(dataset: dataset, version: version).path, mode: .readOnly)
    }

    func execute(_ sql: String) throws { try database.connect().execute(sql) }
}

/// A value shared between a test and callbacks on other threads.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
