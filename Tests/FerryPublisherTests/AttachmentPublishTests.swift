import FerryCore
import FerryStore
import Foundation
import Testing

@testable import FerryPostgres
@testable import FerryPublisher

/// A table's `attachments:` columns: the snapshot says which columns name attachments and when a device downloads
/// them, and a value that is not a SHA-256 fails the publish with the table, column and key named.
@Suite("Attachments on publish")
struct AttachmentPublishTests {
    static let photo = String(repeating: "ab", count: 32)
    static let scan = String(repeating: "0f", count: 32)
    static let schema = """
        CREATE TABLE photos (id integer PRIMARY KEY, note text, image text, scan text,
          updated_at timestamptz NOT NULL DEFAULT '2026-01-01T00:00:00Z');
        INSERT INTO photos VALUES (1, 'meter', '\(photo)', NULL), (2, 'gate', NULL, '\(scan)');
        """
    static let template = """
        dataset: photos
        tables:
          - name: photos
            writable: true
            attachments:
              image: {download: eager}
              scan: {download: on-demand}
        """

    @Test("the snapshot's ferry_attachments names each column and its download, through a full and a step version")
    func metadata() throws {
        let fixture = try PublisherFixture("attach-meta", sql: Self.schema)
        defer { fixture.cleanUp() }
        let path = try fixture.writeTemplate(Self.template)
        _ = try fixture.publish(template: path)
        try fixture.execute("UPDATE photos SET note = 'meter 2' WHERE id = 1")
        let second = try fixture.publish(template: path)
        #expect(second.manifest?.version == 2)
        let expected = [
            AttachmentColumn(table: "photos", column: "image", download: .eager),
            AttachmentColumn(table: "photos", column: "scan", download: .onDemand),
        ]
        for version in [1, 2] {
            let db = try fixture.open(dataset: "photos", version: version)
            #expect(try SnapshotMetadata.read(from: db).attachments == expected)
        }
    }

    @Test("a value that is not a SHA-256 fails the publish, naming the table, column and key; nothing is stored")
    func badValue() throws {
        let fixture = try PublisherFixture("attach-bad", sql: Self.schema)
        defer { fixture.cleanUp() }
        let path = try fixture.writeTemplate(Self.template)
        _ = try fixture.publish(template: path)
        try fixture.execute("UPDATE photos SET scan = 'IMG_0042.JPG' WHERE id = 1")
        let error = #expect(throws: FerryError.self) { try fixture.publish(template: path) }
        #expect(error?.key == "photos.scan")
        #expect(error?.message.contains("table 'photos', column 'scan', row id=1") == true)
        #expect(error?.message.contains("'IMG_0042.JPG'") == true)
        #expect(try fixture.storeAccess.requireManifest("photos").lastVersion == 1)

        // An upper-case hex value is not a name either: names are lowercase.
        try fixture.execute("UPDATE photos SET scan = '\(Self.scan.uppercased())' WHERE id = 1")
        #expect(throws: FerryError.self) { try fixture.publish(template: path) }
    }

    @Test("an attachment column the table does not export is a template error naming the key")
    func unknownColumn() throws {
        let fixture = try PublisherFixture("attach-col", sql: Self.schema)
        defer { fixture.cleanUp() }
        let path = try fixture.writeTemplate(
            """
            dataset: photos
            tables:
              - name: photos
                exclude: [scan]
                attachments: { scan: {} }
            """)
        let error = #expect(throws: FerryError.self) { try fixture.publish(template: path) }
        #expect(error?.key == "tables[0].attachments.scan")
    }

    @Test("the template reads attachments: with eager as the default and refuses an unknown download")
    func parse() throws {
        let template = try Template.parse(
            yaml: """
                dataset: d
                tables:
                  - name: photos
                    attachments:
                      image: {}
                      scan: {download: on-demand}
                """, path: "t.yml")
        #expect(template.tables[0].attachments == ["image": .eager, "scan": .onDemand])
        let error = #expect(throws: FerryError.self) {
            try Template.parse(
                yaml: """
                    dataset: d
                    tables:
                      - name: photos
                        attachments: { image: {download: lazy} }
                    """, path: "t.yml")
        }
        #expect(error?.key == "tables[0].attachments.image.download")
    }
}
