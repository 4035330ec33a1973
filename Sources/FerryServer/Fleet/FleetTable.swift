import FerryCore
import FerryPostgres
import Foundation

/// `ferry_devices`: the fleet, one row per dataset and `Ferry-Device` id, in the database the merge engine writes
/// `ferry_changes` to (docs/operations.md, "The fleet"). Written in batches by ``DeviceFleet`` (one upsert per flush,
/// whatever the number of requests), bounded by ``prune(olderThan:keep:on:)``: devices unseen since the retention
/// cutoff are deleted, and past `keep` devices of a dataset the least recently seen go first.
enum FleetTable {
    static let ddl = """
        CREATE TABLE IF NOT EXISTS ferry_devices(
          dataset text COLLATE "C" NOT NULL,
          device text COLLATE "C" NOT NULL,
          first_seen timestamptz NOT NULL,
          last_seen timestamptz NOT NULL,
          asked_version bigint,
          held_version bigint,
          held_how text,
          held_at timestamptz,
          scope text,
          client text,
          outbox integer,
          local_error text,
          push_at timestamptz,
          push_applied integer,
          push_merged integer,
          push_rejected integer,
          push_gone integer,
          push_invalid integer,
          push_forbidden integer,
          error_status integer,
          error_code text,
          error_at timestamptz,
          PRIMARY KEY (dataset, device));
        """

    /// Creates the table if missing; an advisory lock keeps two servers starting at once from racing.
    static func install(on pg: PostgresConnection) throws {
        try pg.execute(
            "BEGIN; SET LOCAL client_min_messages = warning; SELECT pg_advisory_xact_lock(7301701); \(ddl) COMMIT;")
    }

    /// One note as `json_to_recordset` reads it (keys in snake case: ``write(_:on:)``).
    struct Row: Encodable {
        let dataset: String
        let device: String
        let lastSeen: String
        let askedVersion: Int?
        let heldVersion: Int?
        let heldHow: String?
        let heldAt: String?
        let scope: String?
        let client: String?
        let outbox: Int?
        let localError: String?
        let pushAt: String?
        let push: DeviceNote.Push?
        let errorStatus: Int?
        let errorCode: String?
        let errorAt: String?

        init(_ key: DeviceKey, _ note: DeviceNote) {
            dataset = key.dataset
            device = key.device
            lastSeen = Timestamp.format(note.lastSeen)
            askedVersion = note.askedVersion
            heldVersion = note.heldVersion
            heldHow = note.heldHow
            heldAt = note.heldAt.map(Timestamp.format)
            scope = note.scope
            client = note.client
            outbox = note.outbox
            localError = note.localError
            pushAt = note.pushAt.map(Timestamp.format)
            push = note.push
            errorStatus = note.errorStatus
            errorCode = note.errorCode
            errorAt = note.errorAt.map(Timestamp.format)
        }
    }

    /// Each field of a note replaces the stored one when the note has it; `first_seen` is kept.
    static let upsertSQL = """
        WITH r AS (SELECT * FROM json_to_recordset($1::json) AS r(
            dataset text, device text, last_seen timestamptz, asked_version bigint, held_version bigint, held_how text,
            held_at timestamptz, scope text, client text, outbox integer, local_error text, push_at timestamptz,
            push json, error_status integer, error_code text, error_at timestamptz)),
        up AS (
        INSERT INTO ferry_devices AS d(dataset, device, first_seen, last_seen, asked_version, held_version, held_how,
            held_at, scope, client, outbox, local_error, push_at, push_applied, push_merged, push_rejected, push_gone,
            push_invalid, push_forbidden, error_status, error_code, error_at)
        SELECT dataset, device, last_seen, last_seen, asked_version, held_version, held_how, held_at, scope, client,
            outbox, local_error, push_at, (push->>'applied')::int, (push->>'merged')::int, (push->>'rejected')::int,
            (push->>'gone')::int, (push->>'invalid')::int, (push->>'forbidden')::int, error_status, error_code, error_at
        FROM r
        ON CONFLICT (dataset, device) DO UPDATE SET
          last_seen = greatest(d.last_seen, excluded.last_seen),
          asked_version = coalesce(excluded.asked_version, d.asked_version),
          held_version = coalesce(excluded.held_version, d.held_version),
          held_how = CASE WHEN excluded.held_version IS NULL THEN d.held_how ELSE excluded.held_how END,
          held_at = coalesce(excluded.held_at, d.held_at),
          scope = coalesce(excluded.scope, d.scope),
          client = coalesce(excluded.client, d.client),
          outbox = coalesce(excluded.outbox, d.outbox),
          local_error = coalesce(excluded.local_error, d.local_error),
          push_at = coalesce(excluded.push_at, d.push_at),
          push_applied = CASE WHEN excluded.push_at IS NULL THEN d.push_applied ELSE excluded.push_applied END,
          push_merged = CASE WHEN excluded.push_at IS NULL THEN d.push_merged ELSE excluded.push_merged END,
          push_rejected = CASE WHEN excluded.push_at IS NULL THEN d.push_rejected ELSE excluded.push_rejected END,
          push_gone = CASE WHEN excluded.push_at IS NULL THEN d.push_gone ELSE excluded.push_gone END,
          push_invalid = CASE WHEN excluded.push_at IS NULL THEN d.push_invalid ELSE excluded.push_invalid END,
          push_forbidden = CASE WHEN excluded.push_at IS NULL THEN d.push_forbidden ELSE excluded.push_forbidden END,
          error_status = coalesce(excluded.error_status, d.error_status),
          error_code = CASE WHEN excluded.error_status IS NULL THEN d.error_code ELSE excluded.error_code END,
          error_at = coalesce(excluded.error_at, d.error_at)
        RETURNING (xmax = 0) AS inserted)
        SELECT count(*) FILTER (WHERE inserted)::text FROM up
        """

    /// Writes `notes` in one statement: how many devices were new.
    static func write(_ notes: [DeviceKey: DeviceNote], on pg: PostgresConnection) throws -> Int {
        guard !notes.isEmpty else { return 0 }
        let rows = notes.map { Row($0.key, $0.value) }
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        let json = String(decoding: try encoder.encode(rows), as: UTF8.self)
        return Int(try pg.run(upsertSQL, [json]).first?.first.flatMap { $0 } ?? "0") ?? 0
    }

    /// Deletes devices unseen since `cutoff`, and with `capped`, past the `keep` most recently seen of each dataset:
    /// how many.
    static func prune(olderThan cutoff: Date, keep: Int, capped: Bool, on pg: PostgresConnection) throws -> Int {
        var deleted =
            Int(
                try pg.run(
                    "WITH d AS (DELETE FROM ferry_devices WHERE last_seen < $1::timestamptz RETURNING 1) SELECT count(*)::text FROM d",
                    [Timestamp.format(cutoff)]
                ).first?.first.flatMap { $0 } ?? "0") ?? 0
        guard capped else { return deleted }
        deleted +=
            Int(
                try pg.run(
                    """
                    WITH over AS (SELECT dataset FROM ferry_devices GROUP BY dataset HAVING count(*) > $1::int),
                    ranked AS (SELECT f.dataset, f.device, row_number() OVER (PARTITION BY f.dataset ORDER BY f.last_seen DESC, f.device) AS n
                               FROM ferry_devices f JOIN over USING (dataset)),
                    d AS (DELETE FROM ferry_devices f USING ranked r
                          WHERE r.n > $1::int AND f.dataset = r.dataset AND f.device = r.device RETURNING 1)
                    SELECT count(*)::text FROM d
                    """, [String(keep)]
                ).first?.first.flatMap { $0 } ?? "0") ?? 0
        return deleted
    }

    /// A stored device as JSON (``DeviceRecord``'s keys).
    static let recordJSON = """
        json_build_object('dataset', dataset, 'device', device, 'firstSeen', \(utc("first_seen")),
          'lastSeen', \(utc("last_seen")), 'askedVersion', asked_version, 'heldVersion', held_version,
          'heldHow', held_how, 'heldAt', \(utc("held_at")), 'scope', scope, 'client', client, 'outbox', outbox,
          'localError', local_error, 'lastPush', CASE WHEN push_at IS NULL THEN NULL ELSE json_build_object(
            'at', \(utc("push_at")), 'applied', push_applied, 'merged', push_merged, 'rejected', push_rejected,
            'gone', push_gone, 'invalid', push_invalid, 'forbidden', push_forbidden) END,
          'lastError', CASE WHEN error_status IS NULL THEN NULL ELSE json_build_object(
            'status', error_status, 'code', error_code, 'at', \(utc("error_at"))) END)::text
        """

    static func utc(_ column: String) -> String {
        #"to_char(\#(column) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')"#
    }

    /// The devices of `dataset` (every dataset when nil), most recently seen first, at most `limit`.
    static func list(dataset: String?, limit: Int, on pg: PostgresConnection) throws -> [DeviceRecord] {
        let rows = try pg.run(
            "SELECT \(recordJSON) FROM ferry_devices WHERE ($1::text IS NULL OR dataset = $1) ORDER BY last_seen DESC, dataset, device LIMIT $2::int",
            [dataset, String(limit)])
        return try decode(rows)
    }

    /// Device `id` in each dataset it was seen in (or only in `dataset`).
    static func device(_ id: String, dataset: String?, on pg: PostgresConnection) throws -> [DeviceRecord] {
        let rows = try pg.run(
            "SELECT \(recordJSON) FROM ferry_devices WHERE device = $1 AND ($2::text IS NULL OR dataset = $2) ORDER BY dataset",
            [id, dataset])
        return try decode(rows)
    }

    /// How many devices the table holds.
    static func count(on pg: PostgresConnection) throws -> Int {
        Int(try pg.run("SELECT count(*)::text FROM ferry_devices").first?.first.flatMap { $0 } ?? "0") ?? 0
    }

    static func decode(_ rows: [[String?]]) throws -> [DeviceRecord] {
        let decoder = JSONDecoder()
        return try rows.compactMap { row in
            guard let text = row.first ?? nil else { return nil }
            return try decoder.decode(DeviceRecord.self, from: Data(text.utf8))
        }
    }
}

/// One device of one dataset as the fleet keeps it: the JSON of `GET /v1/devices` (docs/http-api.md).
public struct DeviceRecord: Codable, Sendable, Equatable {
    /// The answers of a push, by status.
    public struct Push: Codable, Sendable, Equatable {
        public var at: String
        public var applied: Int?
        public var merged: Int?
        public var rejected: Int?
        public var gone: Int?
        public var invalid: Int?
        public var forbidden: Int?
    }
    /// An error the server answered the device.
    public struct AnsweredError: Codable, Sendable, Equatable {
        public var status: Int
        public var code: String?
        public var at: String
    }
    public var dataset: String
    public var device: String
    public var firstSeen: String
    public var lastSeen: String
    /// The version it last asked for.
    public var askedVersion: Int?
    /// The version it last downloaded in full or by patch (or was told by a 304 it holds).
    public var heldVersion: Int?
    /// `full`, `patch` or `current`.
    public var heldHow: String?
    public var heldAt: String?
    public var scope: String?
    /// Its `Ferry-Client` header.
    public var client: String?
    /// Its `Ferry-Outbox` header.
    public var outbox: Int?
    /// Its `Ferry-Last-Error` header.
    public var localError: String?
    public var lastPush: Push?
    public var lastError: AnsweredError?
}
