import FerryCore
import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryServer

/// `ferry explain` on a partitioned dataset names the row's partition, found through its column or its parents.
@Suite("Fleet: a row's partition, for explain")
struct PartitionFactsTests {
    @Test("a row's partition through its column, through its parent chain; none for a shared table's row")
    func partitionOfARow() throws {
        let database = try TestDatabase.create("partition-facts")
        defer { database.drop() }
        let pg = try database.connect()
        try pg.execute(PartitionSample.sql)
        let template = try Template.parse(yaml: PartitionSample.template(), path: "projects.yml")
            .resolvingPrimaryKeys(using: pg)
        func partition(_ row: String) throws -> String? {
            let reference = try RowReference(parsing: row)
            let index = try #require(template.tables.firstIndex { $0.name == reference.table })
            return try RowFacts.partitionKey(of: reference, tableAt: index, template: template, pg)
        }
        #expect(try partition("projects:4") == "4")
        #expect(try partition("sites:2") == "3")  // site g is in project 1 + g % 4
        #expect(try partition("findings:3") == "1")  // finding 3 is at site 4, in project 1
        #expect(try partition("checklist_items:1") == nil)
        try pg.execute("UPDATE sites SET project_id = 2 WHERE id = 4")
        #expect(try partition("findings:3") == "2")
    }
}
