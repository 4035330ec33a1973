// `ferry-outbox-bench decode ROWS BATCH`: the CPU the changes route spends around the merge, without PostgreSQL or
// HTTP: decoding ROWS updates in request bodies of BATCH changes (as scripts/lib/outbox_http.py sends them) and
// encoding their answers. Prints "rows decode_seconds encode_seconds".
import FerryCore
import FerryMerge
import Foundation

func decodeBench(rows: Int, batchSize: Int) {
    let bodies: [Data] = stride(from: 1, through: rows, by: batchSize).map { start in
        let changes = (start..<min(start + batchSize, rows + 1)).map { id in
            #"{"id": "\#(UUID().uuidString)", "table": "trips", "op": "update", "key": {"id": \#(id)}, "#
                + #""values": {"seats": \#(id % 7), "name": "V\u00e4xj\u00f6-Kalmar \#(id) d0"}, "#
                + #""editedAt": "2026-11-21T09:30:00.000Z", "baseUpdatedAt": "2026-11-21T09:00:00.000Z"}"#
        }
        return Data(
            (#"{"clientId": "bench-device-0", "sentAt": "2026-11-21T10:00:00.000Z", "changes": ["#
                + changes.joined(separator: ", ") + "]}").utf8)
    }
    let clock = ContinuousClock()
    var batches: [ChangeBatch] = []
    let decoding = clock.measure {
        // The bodies are well formed: a failure here is a bug worth crashing on.
        batches = bodies.map { try! ChangeRequest.decode($0) }
    }
    var bytes = 0
    let encoding = clock.measure {
        for batch in batches {
            let results = batch.changes.map { change in
                ChangeResult(
                    id: change.id, status: .applied,
                    row: [
                        "id": change.key["id"]!, "name": change.values["name"]!, "seats": change.values["seats"]!,
                        "stops": .int(0), "created_at": .string("2026-11-21T09:00:00.000Z"),
                        "updated_at": .string("2026-11-21T10:00:00.000Z"),
                    ], message: nil)
            }
            bytes += AnswerJSON.encode(ChangeResults(results: results)).count
        }
    }
    func seconds(_ d: Duration) -> Double { Double(d.components.attoseconds) / 1e18 + Double(d.components.seconds) }
    print(String(format: "%d %.3f %.3f", rows, seconds(decoding), seconds(encoding)))
}
