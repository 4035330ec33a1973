import FerryCore
import FerryStore
import FerryTestSupport
import Foundation
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

@Suite("Publisher: one stream per partition plus the shared tables")
struct PartitionPublishTests {
    static let sql = PartitionSample.sql
    static let template = PartitionSample.template()

    static func count(_ db: SQLiteConnection, _ sql: String) throws -> Int {
        Int(try db.query(sql).first?.first?.integer ?? -1)
    }

    static func file(_ fixture: PublisherFixture, _ manifest: StoredManifest, _ key: String) throws
        -> SQLiteConnection
    {
        let entry = try #require(manifest.entry(for: key))
        return try SQLiteConnection(
            path: try fixture.storeAccess.fileURL(dataset: "projects", sha256: entry.sha256).path, mode: .readOnly)
    }

    @Test("each partition holds its rows, the shared stream its tables; a change writes only its partition")
    func streams() throws {
        let fixture = try PublisherFixture("partitions", sql: Self.sql)
        defer { fixture.cleanUp() }
        let path = try fixture.writeTemplate(Self.template)

        let first = try fixture.publish(template: path)
        #expect(first.scopes?.map(\.scope) == ["", "1", "2", "3", "4"])
        var manifest = try fixture.storeAccess.requireManifest("projects")
        #expect(manifest.scoped && manifest.partitioning?.tables.map(\.isShared) == [false, false, false, true])
        #expect(manifest.partitioning?.partition == .init(table: "projects", key: "id"))

        let shared = try Self.file(fixture, manifest, "")
        #expect(try Self.count(shared, "SELECT count(*) FROM checklist_items") == 5)
        #expect(try Self.count(shared, "SELECT count(*) FROM sites") == 0)
        #expect(try Self.count(shared, "SELECT count(*) FROM projects") == 0)
        let two = try Self.file(fixture, manifest, "2")
        #expect(try Self.count(two, "SELECT count(*) FROM projects WHERE id = 2") == 1)
        #expect(try Self.count(two, "SELECT count(*) FROM projects") == 1)
        #expect(try Self.count(two, "SELECT count(*) FROM sites WHERE project_id <> 2") == 0)
        #expect(try Self.count(two, "SELECT count(*) FROM sites") == 3)
        // Findings follow their site: those of sites 1, 5 and 9 (project 2), two each.
        #expect(try Self.count(two, "SELECT count(*) FROM findings") == 6)
        #expect(try Self.count(two, "SELECT count(*) FROM checklist_items") == 0)

        // A finding of project 3 changes: only partition 3 takes the new version.
        try fixture.execute("UPDATE findings SET note = 'changed' WHERE site_id = 2")
        let second = try fixture.publish(template: path)
        let changed = second.scopes?.filter { !$0.unchanged }.map(\.scope)
        #expect(changed == ["3"])
        // The other partitions were read and hashed in one pass, not built: only partition 3 (10 rows, 2 findings
        // changed) and the shared stream (5 rows) were.
        #expect(
            second.incremental?.unchanged == 13 && second.incremental?.updated == 2,
            "\(String(describing: second.incremental))")

        // A site moves from project 1 to project 2: both change. Project 4 is archived: it is retired.
        try fixture.execute(
            "UPDATE sites SET project_id = 2 WHERE id = 4; UPDATE projects SET archived = true WHERE id = 4")
        let third = try fixture.publish(template: path)
        #expect(third.scopes?.filter { !$0.unchanged }.map(\.scope) == ["1", "2"])
        manifest = try fixture.storeAccess.requireManifest("projects")
        #expect(manifest.scopes.map(\.scope) == ["", "1", "2", "3"])
        #expect(manifest.retiredPartitions == ["4"])
        #expect(try Self.count(Self.file(fixture, manifest, "2"), "SELECT count(*) FROM sites WHERE id = 4") == 1)
        #expect(try Self.count(Self.file(fixture, manifest, "1"), "SELECT count(*) FROM sites WHERE id = 4") == 0)

        // It comes back: no longer retired.
        try fixture.execute("UPDATE projects SET archived = false WHERE id = 4")
        _ = try fixture.publish(template: path)
        manifest = try fixture.storeAccess.requireManifest("projects")
        #expect(manifest.retiredPartitions == nil && manifest.entry(for: "4") != nil)
    }

    @Test("a template that cannot place a row names the table and the key")
    func refusals() throws {
        func error(_ yaml: String) -> FerryError? {
            do {
                _ = try Template.parse(yaml: yaml, path: "t.yml")
                return nil
            } catch { return error as? FerryError }
        }
        let both = error(
            Self.template.replacingOccurrences(
                of: "    parent: { table: sites, column: site_id }",
                with: "    parent: { table: sites, column: site_id }\n    partition: project_id"))
        #expect(both?.key == "tables[2].partition" && both?.message.contains("two partitions") == true)
        let sharedParent = error(
            Self.template.replacingOccurrences(of: "    parent: { table: sites, column: site_id }", with: "")
                + "\n  - name: notes\n    parent: { table: findings, column: finding_id }\n")
        #expect(
            sharedParent?.key == "tables[4].parent.table"
                && sharedParent?.message.contains("'findings' is shared") == true)
        let scoped = error(Self.template + "\nscope:\n  values: [1]\n  token: SELECT 1 WHERE $1 = 'x'\n")
        #expect(
            scoped?.key == "partition" && scoped?.message.contains("not both") == true, "\(String(describing: scoped))")
        let noSection = error(
            "dataset: p\ntables:\n  - name: sites\n    partition: project_id\n")
        #expect(noSection?.key == "tables[0].partition")
        let unknownTable = error(
            Self.template.replacingOccurrences(of: "  table: projects\n", with: "  table: project\n"))
        #expect(unknownTable?.key == "partition.table")
    }
}

extension PartitionPublishTests {
    @Test("a partition column the source lacks is named at its table's key, before any child's")
    func missingColumn() throws {
        let fixture = try PublisherFixture("partitions-column", sql: Self.sql)
        defer { fixture.cleanUp() }
        let path = try fixture.writeTemplate(
            Self.template.replacingOccurrences(of: "partition: project_id", with: "partition: projectid"))
        do {
            _ = try fixture.publish(template: path)
            Issue.record("published a template whose partition column does not exist")
        } catch let error as FerryError {
            #expect(error.key == "tables[1].partition" && error.message.contains("no column 'projectid'"), "\(error)")
        }
    }
}
