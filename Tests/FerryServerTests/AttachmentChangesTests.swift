import FerryCore
import FerryMerge
import FerryPostgres
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import FerryServer

/// A change whose attachment column names an attachment the server does not hold is answered `invalid`, naming the
/// column, and PostgreSQL is left untouched; one naming a held attachment applies.
@Suite struct AttachmentChangesTests {
    static let ddl = """
        CREATE TABLE trips(
          id int PRIMARY KEY, name text NOT NULL, photo text,
          created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL);
        """
    static let edited = "2026-11-21T09:30:00.000Z"

    @Test("a change naming a missing attachment is invalid with the column; one naming a held attachment applies")
    func missingAttachmentIsInvalid() async throws {
        var table = MergeTable(name: "trips", source: "trips", writable: true)
        table.attachments = ["photo"]
        let f = try await MergeFixture.make(ddl: Self.ddl, tables: [table], clock: "2026-11-21T10:00:00.000Z")
        defer { f.close() }
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()  // the dataset the attachments belong to
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let app = try await buildApplication(
            store.configuration(), logger: logger, wiring: ServerWiring(mergers: ["trips": f.merger]))
        let photo = AttachmentRouteTests.bytes(4000)
        let held = sha256Hex(photo)
        let missing = String(repeating: "b", count: 64)
        try await app.test(.live) { client in
            let put = try await client.execute(
                uri: AttachmentRouteTests.uri(held), method: .put, body: ByteBuffer(bytes: photo))
            #expect(put.status == .created)
            let batch = ChangeBatch(
                clientId: "device-1", sentAt: "2026-11-21T10:00:00.000Z",
                changes: [
                    change(
                        .insert, id: 1, values: ["name": .string("a"), "photo": .string(held)], edited: Self.edited),
                    change(
                        .insert, id: 2, values: ["name": .string("b"), "photo": .string(missing)], edited: Self.edited),
                    change(
                        .insert, id: 3, values: ["name": .string("c"), "photo": .string("photo.jpg")],
                        edited: Self.edited),
                    change(.insert, id: 4, values: ["name": .string("d"), "photo": .null], edited: Self.edited),
                ])
            let response = try await client.execute(
                uri: "/v1/datasets/trips/changes", method: .post,
                body: ByteBuffer(bytes: try JSONEncoder().encode(batch)))
            #expect(response.status == .ok)
            let results = try JSONDecoder().decode(ChangeResults.self, from: response.bodyData).results
            #expect(results.map(\.status) == [.applied, .invalid, .invalid, .applied])
            #expect(results[1].message?.contains("trips.photo") == true)
            #expect(results[1].message?.contains(missing) == true)
            #expect(results[2].message?.contains("trips.photo") == true)
        }
        // PostgreSQL holds the rows that applied, and nothing of the refused ones.
        #expect(try f.count("SELECT count(*) FROM trips") == 2)
        #expect(try f.count("SELECT count(*) FROM trips WHERE id IN (2, 3)") == 0)
        #expect(try f.count("SELECT count(*) FROM trips WHERE id = 1 AND photo = $1", [held]) == 1)
    }
}
