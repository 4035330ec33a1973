import FerryCore
import FerryStore
import Foundation
import Testing

@testable import FerryServer

@Suite("Status: a scoped dataset is described as a whole, never by scope")
struct StatusReportTests {
    static func record(_ version: Int, sha: Character, size: Int64, rows: Int) -> VersionRecord {
        VersionRecord(
            published: PublishedVersion(
                version: version, sha256: String(repeating: sha, count: 64), size: size, gzipSize: size / 4,
                createdAt: "2026-03-0\(version)T10:00:00.000Z", schemaVersion: 1, tables: ["campgrounds": rows]),
            dataDigest: String(repeating: "d", count: 64))
    }

    static func view(scope: String, _ records: [VersionRecord]) -> CatalogStatus.View {
        let entry = ScopeEntry(scope: scope, retained: records)
        return CatalogStatus.View(manifest: entry.manifest(dataset: "tiered"), retained: records)
    }

    @Test func scopedTotalsAsOfEachVersion() throws {
        // Given three scopes: "free" changed at v1 and v3, "secret-tenant-42" only at v1, "premium" at v2 (same file as
        // free@v3)
        let free = Self.view(
            scope: "free",
            [Self.record(1, sha: "a", size: 1000, rows: 10), Self.record(3, sha: "c", size: 3000, rows: 30)])
        let tenant = Self.view(scope: "secret-tenant-42", [Self.record(1, sha: "b", size: 2000, rows: 20)])
        let premium = Self.view(scope: "premium", [Self.record(2, sha: "c", size: 3000, rows: 30)])
        let catalog = CatalogStatus(
            datasets: [.init(name: "tiered", scoped: true, views: [free, tenant, premium])], lastPoll: Date(),
            unreadableManifests: [])

        let report = StatusReport.make(
            catalog: catalog, board: StatusBoard(), tokenChecks: ["tiered": nil], store: "s3://ferry-store/prod/",
            now: Timestamp.parse("2026-03-03T10:01:00.000Z")!)

        let dataset = try #require(report.datasets.first)
        #expect(dataset.scoped && dataset.version == 3 && dataset.ageSeconds == 60)
        #expect(dataset.size == 3000 + 2000 + 3000 && dataset.rows == 80 && dataset.tables == ["campgrounds": 80])
        // v1: free@1 + tenant@1; v2: + premium@2; v3: free@3 + tenant@1 + premium@2
        #expect(dataset.retained.map(\.version) == [1, 2, 3])
        #expect(dataset.retained.map(\.size) == [3000, 6000, 8000])
        #expect(dataset.retained.map(\.rows) == [30, 60, 80])
        #expect(
            dataset.retained.map(\.createdAt) == [
                "2026-03-01T10:00:00.000Z", "2026-03-02T10:00:00.000Z", "2026-03-03T10:00:00.000Z",
            ])
        let scopes = try #require(dataset.scopes)
        #expect(scopes.count == 3 && scopes.distinctFiles == 3 && scopes.distinctCurrentFiles == 2)
        #expect(scopes.largest == .init(version: 3, size: 3000, gzipSize: 750, rows: 30))
        #expect(report.health.datasets.map(\.tokenCheck) == [true])

        // And no scope value appears in the JSON or the page
        let json = String(decoding: try report.jsonData(), as: UTF8.self)
        let page = StatusPage.render(report)
        // The store is named in both (a bucket's URL here).
        #expect(json.contains(#""store" : "s3://ferry-store/prod/""#), "\(json)")
        #expect(page.contains(#"data-field="store" data-value="s3://ferry-store/prod/">s3://ferry-store/prod/<"#))
        for scope in ["free", "secret-tenant-42", "premium"] {
            #expect(!json.contains(scope) && !page.contains(scope), "\(scope)")
        }
    }

    @Test func formats() {
        #expect(StatusFormat.bytes(512) == "512 B" && StatusFormat.bytes(49_152) == "48.0 KiB")
        #expect(StatusFormat.count(1_234_567) == "1\u{202F}234\u{202F}567")
        #expect(StatusFormat.duration(seconds: 3 * 3600 + 720) == "3 h 12 min")
        #expect(StatusFormat.escape(#"<a href="x">&'"#) == "&lt;a href=&quot;x&quot;&gt;&amp;&#39;")
    }
}
