import FerryClient
import FerryCore
import Foundation

/// `ferry exec --json`: `{"changes":N,"columns":[…],"outbox":N,"rows":[[…]]}`. A blob is base64 text, ±Infinity a
/// string.
struct ExecJSON: Encodable {
    let result: StatementResult
    let outbox: Int

    enum CodingKeys: String, CodingKey { case changes, columns, outbox, rows }

    /// One cell: null, a number, text, or base64 for a blob.
    struct Cell: Encodable {
        let value: SQLiteValue

        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch value {
            case .null: try container.encodeNil()
            case .integer(let i): try container.encode(i)
            case .real(let d): try container.encode(d)
            case .text(let s): try container.encode(s)
            case .blob(let b): try container.encode(Data(b).base64EncodedString())
            }
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(result.changes, forKey: .changes)
        try container.encode(result.columns, forKey: .columns)
        try container.encode(outbox, forKey: .outbox)
        try container.encode(result.rows.map { $0.map(Cell.init) }, forKey: .rows)
    }
}

extension SQLiteValue {
    /// The value as `ferry exec` prints it in a tab-separated row.
    var cellText: String {
        switch self {
        case .null: return "NULL"
        case .integer(let i): return String(i)
        case .real(let d): return String(d)
        case .text(let s): return s
        case .blob(let b): return "x'" + b.map { String(format: "%02x", $0) }.joined() + "'"
        }
    }
}
