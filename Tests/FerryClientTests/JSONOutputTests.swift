import FerryCore
import FerryStore
import Foundation
import Testing

@testable import FerryClient

/// `--json` is a contract: exactly these keys, in this order, `null` when absent; new fields only ever go at the end.
/// The CLI renders it, so these run the built `ferry`.
@Suite struct JSONOutputTests {
    @Test func execJSONKeepsKeysValuesAndEscapes() async throws {
        // Given a client directory with a published snapshot as database.db
        let temp = try TemporaryDirectory("ferry-json")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        try fixtures.publish()
        let dir = ClientDirectory(temp.appending("client"))
        try dir.create()
        try FileManager.default.copyItem(at: fixtures.snapshotFile(1), to: dir.database)

        // When a select returns every kind of value
        let sql = #"SELECT 1 AS i, 1.5 AS r, 'a/b "q" \ ü' || char(10) AS t, NULL AS n, x'00ff' AS b, 9e999 AS inf"#
        let result = try await runFerry(["exec", "--dir", dir.url.path, "--json", sql])

        // Then the line has the documented keys in order, slashes unescaped, a blob as base64
        #expect(result.status == 0, "\(result.stderr)")
        #expect(
            result.stdout
                == #"{"changes":0,"columns":["i","r","t","n","b","inf"],"outbox":0,"rows":[[1,1.5,"a/b \"q\" \\ ü\n",null,"AP8=","Infinity"]]}"#
                + "\n")
    }

    /// `fetch --json`: the status, then `result`, `applied`, `bytesReceived` (over the wire), `resumedFrom`, since
    /// compressed downloads `fileBytes` and `encoding`, and since patches `path`, `patchFrom`, `patchTo`, `patchError`,
    /// and `publishedBytes`.
    @Test func fetchJSONKeepsItsKeysAndAddsFileBytesAndEncoding() async throws {
        let temp = try TemporaryDirectory("ferry-json")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        let v1 = try fixtures.publish(rows: 5, textMiB: 1)
        let dir = ClientDirectory(temp.appending("client"))
        try await withFerryServer(store: fixtures.store.root) { url, _ in
            let fetch = [
                "fetch", "--server", url.absoluteString, "--dataset", fixtures.dataset, "--dir", dir.url.path, "--json",
            ]
            let first = try await runFerry(fetch)
            #expect(first.status == 0, "\(first.stderr)")
            #expect(
                first.stdout
                    == #"{"state":"upToDate","version":1,"sha256":"\#(v1.sha256)","pendingVersion":null,"pendingSha256":null,"outbox":0,"result":"initialSync","applied":false,"bytesReceived":\#(v1.gzipSize),"resumedFrom":0,"fileBytes":\#(v1.size),"encoding":"gzip","path":"full","patchFrom":null,"patchTo":null,"patchError":null,"publishedBytes":\#(v1.size),"ownRowsSettled":null,"attachments":{"bytes":0,"downloaded":0,"evicted":0,"missing":[],"removed":0}}"#
                    + "\n")
            let second = try await runFerry(fetch)
            #expect(second.status == 0, "\(second.stderr)")
            #expect(
                second.stdout
                    == #"{"state":"upToDate","version":1,"sha256":"\#(v1.sha256)","pendingVersion":null,"pendingSha256":null,"outbox":0,"result":"notModified","applied":false,"bytesReceived":0,"resumedFrom":0,"fileBytes":null,"encoding":null,"path":null,"patchFrom":null,"patchTo":null,"patchError":null,"publishedBytes":null,"ownRowsSettled":null,"attachments":null}"#
                    + "\n")
        }
    }

    @Test func pushJSONWithAnEmptyOutbox() async throws {
        let temp = try TemporaryDirectory("ferry-json")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        try fixtures.publish()
        let dir = ClientDirectory(temp.appending("client"))
        try dir.create()
        try FileManager.default.copyItem(at: fixtures.snapshotFile(1), to: dir.database)

        // Nothing is queued, so nothing goes over the network (the server is never asked).
        let result = try await runFerry([
            "push", "--server", "http://127.0.0.1:9", "--dataset", "trips", "--dir", dir.url.path, "--json",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(
            result.stdout
                == #"{"sent":0,"applied":0,"rejected":0,"gone":0,"invalid":0,"forbidden":0,"unanswered":0,"remaining":0,"merged":0,"attachments":{"bytes":0,"pending":0,"uploaded":0}}"#
                + "\n")
    }

    @Test func rollbackJSONAddsTheRolledBackVersion() async throws {
        let temp = try TemporaryDirectory("ferry-json")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        let v1 = try fixtures.publish()
        try fixtures.publish()
        let dir = ClientDirectory(temp.appending("client"))
        try dir.create()
        try FileManager.default.copyItem(at: fixtures.snapshotFile(1), to: dir.database)
        try FileManager.default.copyItem(at: fixtures.snapshotFile(2), to: dir.updated)
        #expect(try await runFerry(["apply", "--dir", dir.url.path]).status == 0)

        let result = try await runFerry(["rollback", "--dir", dir.url.path, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(
            result.stdout
                == #"{"state":"upToDate","version":1,"sha256":"\#(v1.sha256)","pendingVersion":null,"pendingSha256":null,"outbox":0,"rolledBackVersion":2}"#
                + "\n")
    }
}
