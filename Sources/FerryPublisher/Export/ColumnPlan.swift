import FerryCore
import FerryPostgres

/// How one exported column travels: the SELECT expression sent to PostgreSQL, how its binary COPY value is
/// decoded, and the SQLite type (affinity) it gets. This is the type mapping of `docs/templates.md`:
///
/// | PostgreSQL                          | travels as              | SQLite                              |
/// |-------------------------------------|-------------------------|-------------------------------------|
/// | smallint, integer, bigint, oid      | binary integer          | INTEGER                             |
/// | boolean                             | binary byte             | INTEGER 0/1                         |
/// | real, double precision              | binary IEEE 754         | REAL                                |
/// | text, varchar, char(n), name, enum  | UTF-8 bytes             | TEXT                                |
/// | json                                | UTF-8 bytes             | TEXT                                |
/// | jsonb                               | version byte + UTF-8    | TEXT                                |
/// | uuid                                | 16 bytes                | TEXT `8-4-4-4-12` lowercase hex     |
/// | bytea                               | raw bytes               | BLOB                                |
/// | date                                | days since 2000-01-01   | TEXT `YYYY-MM-DD`                   |
/// | timestamp, timestamptz              | µs since 2000-01-01 UTC | TEXT `YYYY-MM-DDTHH:MM:SS.sssZ`     |
/// | numeric                             | `col::text`             | TEXT (exact digits)                 |
/// | arrays                              | `to_json(col)::text`    | TEXT JSON array                     |
/// | anything else (time, interval, inet, money, …) | `col::text` | TEXT                                |
struct ColumnPlan: Equatable {
    /// The SQLite column name: PostgreSQL's, or the template's `rename:` of it.
    let name: String
    /// The column as the rows query reports it (PostgreSQL's name).
    let sourceName: String
    /// PostgreSQL type OID (of the base type, for domains).
    let typeOID: UInt32
    /// PostgreSQL type name, for messages and the digest.
    let typeName: String
    let kind: Kind

    enum Kind: UInt8, Equatable {
        case int2, int4, int8, oid, bool, float4, float8
        /// UTF-8 bytes, bound as TEXT without conversion.
        case text
        case jsonb, uuid, bytea, date, timestamp
        /// Converted by PostgreSQL with `::text`; arrives as text.
        case castText
        /// Converted by PostgreSQL with `to_json(…)::text`; arrives as text.
        case arrayJSON
    }

    var sqliteType: String {
        switch kind {
        case .int2, .int4, .int8, .oid, .bool: return "INTEGER"
        case .float4, .float8: return "REAL"
        case .bytea: return "BLOB"
        case .text, .jsonb, .uuid, .date, .timestamp, .castText, .arrayJSON: return "TEXT"
        }
    }

    /// The expression in the generated SELECT (PostgreSQL side), named as the SQLite column.
    var selectExpression: String {
        let source = SQLIdentifier.quote(sourceName)
        let alias = SQLIdentifier.quote(name)
        switch kind {
        case .castText: return "\(source)::text AS \(alias)"
        case .arrayJSON: return "to_json(\(source))::text AS \(alias)"
        default: return source == alias ? source : "\(source) AS \(alias)"
        }
    }

    /// Whether ORDER BY on this column should use the "C" collation, so PostgreSQL sorts text exactly as SQLite's
    /// BINARY collation does and the primary-key index is built by appending.
    var sortsAsText: Bool { kind == .text && [25, 1043, 1042, 19].contains(typeOID) }

    /// Chooses the transfer kind for a type. `typtype`/`typcategory` come from pg_type (`e` enum, `A` array).
    static func kind(oid: UInt32, typtype: String, category: String) -> Kind {
        switch oid {
        case 21: return .int2
        case 23: return .int4
        case 20: return .int8
        case 26: return .oid
        case 16: return .bool
        case 700: return .float4
        case 701: return .float8
        case 25, 1043, 1042, 19, 114: return .text
        case 3802: return .jsonb
        case 2950: return .uuid
        case 17: return .bytea
        case 1082: return .date
        case 1114, 1184: return .timestamp
        default:
            if typtype == "e" { return .text }
            if category == "A" { return .arrayJSON }
            return .castText
        }
    }
}
