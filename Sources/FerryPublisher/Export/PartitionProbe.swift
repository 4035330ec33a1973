import FerryCore
import FerryPostgres
import Logging

/// The data digest of every partition of a partitioned dataset from one read of each table (docs/partitions.md):
/// one `COPY` per table of all partitions' rows, each with its key, grouped by key in primary key order, split into
/// exactly the bytes each partition's own `COPY` would send (the binary header, its rows without the key field, the
/// trailer), and hashed as ``SnapshotExporter`` hashes them. A partition whose digest equals its current version's
/// needs no export: a publish after a small change reads each row once and builds only the partitions that changed.
/// A digest that is wrong in any way only makes its partition be exported as before.
struct PartitionProbe {
    let template: Template
    let plans: [TablePlan]

    /// The binary `COPY` header PostgreSQL sends (signature, no flags, no extension).
    static let header: [UInt8] = Array("PGCOPY\n".utf8) + [0xFF, 0x0D, 0x0A, 0x00] + [0, 0, 0, 0] + [0, 0, 0, 0]
    static let trailer: [UInt8] = [0xFF, 0xFF]
    /// PostgreSQL's `work_mem` while the probe sorts.
    static let sortMemory = "256MB"

    /// The digests of the partitions `keys` (not the shared stream's), each starting from `start` (the exporter's
    /// digest before the rows), read in `pg`'s transaction.
    func digests(keys: [String], start: StreamingSHA256, pg: PostgresConnection) throws -> [String: String] {
        guard !keys.isEmpty else { return [:] }
        _ = try pg.query(ScopeSQL.setScopeSQL, [keys.joined(separator: "\n")])
        // Grouping every row by its key is a sort of the whole table: in memory, not in temporary files; the setting
        // is put back for the exports that follow in this transaction.
        let workMem = try pg.query("SHOW work_mem").first?.first ?? nil
        _ = try pg.query("SELECT set_config('work_mem', $1, true)", [Self.sortMemory])
        defer {
            // Only a setting of this read-only transaction: a failure leaves the exports more sort memory.
            if let workMem { _ = try? pg.query("SELECT set_config('work_mem', $1, true)", [workMem]) }
        }
        // By index, so each row's hash is updated in place.
        let index = Dictionary(keys.enumerated().map { ($0.element, $0.offset) }, uniquingKeysWith: { a, _ in a })
        var digests = Array(repeating: start, count: keys.count)
        for plan in plans {
            for i in digests.indices { digests[i].update("rows=\(plan.name)\n") }
            var started = Array(repeating: false, count: keys.count)
            if let keyed = keyedRowsSQL(tableAt: plan.index) {
                var splitter = CopySplitter()
                _ = try pg.copyOut(
                    "COPY (SELECT q.ferry_key::text, \(plan.selectList) FROM (\(keyed)) AS q ORDER BY q.ferry_key, \(plan.keyOrder)) TO STDOUT (FORMAT binary)"
                ) { message in
                    try splitter.consume(message) { key, count, fields in
                        guard let i = index[key] else { return }
                        if !started[i] {
                            started[i] = true
                            digests[i].update(Self.header)
                        }
                        digests[i].update(count)
                        digests[i].update(fields)
                    }
                }
            }
            // Each partition's own COPY of the table: the header (unless its rows began with it), rows, the trailer.
            for i in digests.indices {
                if !started[i] { digests[i].update(Self.header) }
                digests[i].update(Self.trailer)
            }
        }
        return Dictionary(keys.indices.map { (keys[$0], digests[$0].finalizeHex()) }, uniquingKeysWith: { a, _ in a })
    }

    /// `SELECT <key> AS ferry_key, ferry_q.* …`: the rows of table `index` in every partition `ferry.scope` names,
    /// each with its partition key; nil for a shared table.
    func keyedRowsSQL(tableAt index: Int) -> String? {
        guard let plan = plans.first(where: { $0.index == index }) else { return nil }
        switch template.placement(ofTableAt: index) {
        case .shared:
            return nil
        case .column(let column):
            return
                "SELECT ferry_q.\(SQLIdentifier.quote(column)) AS ferry_key, ferry_q.* FROM (\(plan.rowsQuery)) AS ferry_q"
        case .parent:
            let table = plan.table
            guard let link = table.parent,
                let parentIndex = template.tables.firstIndex(where: { $0.name == link.table }),
                let parentPlan = plans.first(where: { $0.index == parentIndex }),
                let parentKey = parentPlan.primaryKey.first.map(parentPlan.table.sourceColumn(of:)),
                let parent = keyedRowsSQL(tableAt: parentIndex)
            else { return nil }
            // The join with the keyed parent rows is the parent chain: the table's own rows need only its filter.
            let source = table.query.map { "(\($0))" } ?? SQLIdentifier.quoteQualified(table.source)
            let rows = "SELECT * FROM \(source) AS ferry_t" + (table.filter.map { " WHERE (\($0))" } ?? "")
            return
                "SELECT ferry_p.ferry_key, ferry_q.* FROM (\(rows)) AS ferry_q JOIN (\(parent)) AS ferry_p ON ferry_q.\(SQLIdentifier.quote(link.column)) = ferry_p.\(SQLIdentifier.quote(parentKey))"
        }
    }
}

/// Splits a binary `COPY` stream whose first field is a text key into each row without the key field: the row as a
/// `COPY` of the same query without that column sends it (PostgreSQL's binary format: a 19-byte header, then per row
/// an int16 field count and per field an int32 length, -1 for NULL, and the bytes; an int16 -1 ends the stream).
struct CopySplitter {
    private var pending: [UInt8] = []
    private var sawHeader = false
    /// The last key and its bytes: rows come grouped by key, so a key's text is made once per group.
    private var lastKey = ""
    private var lastKeyBytes: [UInt8] = []

    /// Feeds one message; for each complete row, `row` gets its key, its field count less one (2 bytes) and its
    /// fields after the key: together, the row without the key field.
    mutating func consume(
        _ message: UnsafeRawBufferPointer, row: (String, UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Void
    ) throws {
        pending.append(contentsOf: message)
        var offset = 0
        if !sawHeader {
            guard pending.count >= 19 else { return }
            guard Array(pending[0..<19]) == PartitionProbe.header else {
                throw FerryError(.database, "the binary COPY header is not the one expected")
            }
            sawHeader = true
            offset = 19
        }
        while pending.count - offset >= 2 {
            let count = Int(Int16(bitPattern: UInt16(pending[offset]) << 8 | UInt16(pending[offset + 1])))
            if count == -1 {
                offset += 2
                continue
            }
            guard count >= 1, let end = Self.endOfRow(pending, at: offset + 2, fields: count) else { break }
            let keyLength = Int(Self.int32(pending, at: offset + 2))
            guard keyLength >= 0 else { throw FerryError(.database, "a partition key is NULL") }
            let keyBytes = pending[(offset + 6)..<(offset + 6 + keyLength)]
            if !keyBytes.elementsEqual(lastKeyBytes) {
                lastKeyBytes = Array(keyBytes)
                lastKey = String(decoding: keyBytes, as: UTF8.self)
            }
            let fieldCount: [UInt8] = [
                UInt8(truncatingIfNeeded: (count - 1) >> 8), UInt8(truncatingIfNeeded: count - 1),
            ]
            let fieldsStart = offset + 6 + keyLength
            fieldCount.withUnsafeBytes { countBytes in
                pending.withUnsafeBytes { all in
                    row(lastKey, countBytes, UnsafeRawBufferPointer(rebasing: all[fieldsStart..<end]))
                }
            }
            offset = end
        }
        pending.removeFirst(offset)
    }

    static func int32(_ bytes: [UInt8], at i: Int) -> Int32 {
        Int32(
            bitPattern: UInt32(bytes[i]) << 24 | UInt32(bytes[i + 1]) << 16 | UInt32(bytes[i + 2]) << 8
                | UInt32(bytes[i + 3]))
    }

    /// Where the row whose fields start at `start` ends, or nil while its bytes have not all arrived.
    static func endOfRow(_ bytes: [UInt8], at start: Int, fields: Int) -> Int? {
        var i = start
        for _ in 0..<fields {
            guard bytes.count - i >= 4 else { return nil }
            i += 4 + max(0, Int(int32(bytes, at: i)))
            guard i <= bytes.count else { return nil }
        }
        return i
    }
}

extension Publisher {
    /// The digests of the partitions `keys` of a partitioned template, from one read of each table
    /// (``PartitionProbe``); empty for any other template. A failure is logged and leaves every partition to be
    /// exported (and compared) as a scope is.
    func probePartitions(template: Template, main: ExportSession, keys: [String]) throws -> [String: String] {
        guard template.partition != nil, !keys.isEmpty else { return [:] }
        let exporter = SnapshotExporter(template: template, logger: logger)
        let start = exporter.startDigest(plans: main.plans, schemaDDL: try exporter.schemaDDL())
        // In a savepoint: a failing query must not abort the export's transaction.
        try main.pg.execute("SAVEPOINT ferry_probe")
        do {
            let digests = try PartitionProbe(template: template, plans: main.plans).digests(
                keys: keys.filter { $0 != PartitionLayout.sharedStream }, start: start, pg: main.pg)
            try main.pg.execute("RELEASE SAVEPOINT ferry_probe")
            return digests
        } catch let error as FerryError where error.code == .database {
            try main.pg.execute("ROLLBACK TO SAVEPOINT ferry_probe")
            logger.warning(
                "the partitions could not be probed in one read; each is exported and compared",
                metadata: ["dataset": "\(template.dataset)", "error": "\(error.message)"])
            return [:]
        }
    }
}
