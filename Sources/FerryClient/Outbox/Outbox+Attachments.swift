import FerryCore
import Foundation

extension Outbox {
    /// The sequence number of the first queued edit with a value equal to one of `attachments` (SHA-256s still
    /// waiting for upload); nil when none names one. A push sends only the edits before it.
    ///
    /// ```swift
    /// let first = try Outbox.firstSequence(naming: ["9f86d0…"], in: db)
    /// ```
    public static func firstSequence(naming attachments: Set<String>, in db: SQLiteConnection) throws -> Int64? {
        guard !attachments.isEmpty, try hasQueue(db) else { return nil }
        let list = String(decoding: try JSONEncoder().encode(attachments.sorted()), as: UTF8.self)
        return try db.scalar(
            """
            SELECT min(o.seq) FROM ferry_outbox o, json_each(o.vals) v
            WHERE v.type = 'text' AND v.value IN (SELECT value FROM json_each(?))
            """, [.text(list)]
        )?.integer
    }
}
