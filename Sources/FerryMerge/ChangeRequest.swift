import FerryCore
import Foundation

/// Reads and checks the body of `POST /v1/datasets/{dataset}/changes` before anything is applied. Every failure
/// is a `FerryError(.badInput)` (HTTP 400) whose message names the field and the limit, and nothing is applied.
/// The body must be strict JSON (``StrictJSON``: no duplicate key, at most ``maxDepth`` levels, UTF-8 without
/// NUL, numbers that fit Int64 or Double) before it is decoded.
///
/// ```swift
/// let batch = try ChangeRequest.decode(body, limits: .init())   // ChangeBatch
/// ```
public enum ChangeRequest {
    /// Limits of one request.
    ///
    /// ```swift
    /// let limits = ChangeRequest.Limits(maxBodyBytes: 16 << 20)
    /// ```
    public struct Limits: Sendable, Equatable {
        /// Largest body accepted. Default 8 MiB.
        public var maxBodyBytes: Int
        /// Most changes in one batch. Default 10,000.
        public var maxChanges: Int
        /// Longest change id and client id. Default 200 characters.
        public var maxIdentifierLength: Int

        public init(maxBodyBytes: Int = 8 << 20, maxChanges: Int = 10_000, maxIdentifierLength: Int = 200) {
            self.maxBodyBytes = maxBodyBytes
            self.maxChanges = maxChanges
            self.maxIdentifierLength = maxIdentifierLength
        }
    }

    /// How deeply the body may nest. A batch is 4 levels deep (batch, changes, change, key or values); this is a
    /// property of the format, not a tunable limit.
    public static let maxDepth = 16

    /// Decodes and validates a request body.
    ///
    /// ```swift
    /// do { let batch = try ChangeRequest.decode(Data("{}".utf8)) }
    /// catch let error as FerryError { print(error.message) }   // "missing field 'clientId' …"
    /// ```
    public static func decode(_ body: Data, limits: Limits = Limits()) throws -> ChangeBatch {
        guard body.count <= limits.maxBodyBytes else {
            throw bad(
                "the request body is \(body.count) bytes, over the limit of \(limits.maxBodyBytes) bytes; send fewer changes per batch"
            )
        }
        do {
            try StrictJSON.check(body, maxDepth: maxDepth)
        } catch {
            throw bad("the request body is not valid JSON for a change batch: \(error)")
        }
        // The plain shape of a batch is read directly; anything else (and every error) is JSONDecoder's.
        if let batch = body.withUnsafeBytes({ ChangeBatchReader.read($0.bindMemory(to: UInt8.self)) }) {
            try validate(batch, limits: limits)
            return batch
        }
        let batch: ChangeBatch
        do {
            batch = try JSONDecoder().decode(ChangeBatch.self, from: body)
        } catch let error as DecodingError {
            throw bad(describe(error))
        } catch {
            throw bad("the request body is not valid JSON")
        }
        try validate(batch, limits: limits)
        return batch
    }

    /// Checks a decoded batch against the limits and the wire format (ids present, timestamps well formed).
    ///
    /// ```swift
    /// try ChangeRequest.validate(batch, limits: .init(maxChanges: 500))
    /// ```
    public static func validate(_ batch: ChangeBatch, limits: Limits = Limits()) throws {
        guard !batch.clientId.isEmpty, batch.clientId.count <= limits.maxIdentifierLength else {
            throw bad("clientId must be 1 to \(limits.maxIdentifierLength) characters", key: "clientId")
        }
        guard Timestamp.parseMillis(batch.sentAt) != nil else {
            throw bad(
                "sentAt '\(batch.sentAt.prefix(40))' is not an ISO-8601 timestamp such as 2026-11-21T10:00:00.000Z",
                key: "sentAt")
        }
        guard batch.changes.count <= limits.maxChanges else {
            throw bad(
                "the batch has \(batch.changes.count) changes, over the limit of \(limits.maxChanges); split it",
                key: "changes")
        }
        for (i, change) in batch.changes.enumerated() {
            guard !change.id.isEmpty, change.id.count <= limits.maxIdentifierLength, !change.id.utf8.contains(0) else {
                throw bad(
                    "changes[\(i)].id must be 1 to \(limits.maxIdentifierLength) characters (a UUID)",
                    key: "changes[\(i)].id")
            }
        }
    }

    static func bad(_ message: String, key: String? = nil) -> FerryError {
        FerryError(.badInput, message, key: key)
    }

    static func path(_ codingPath: [any CodingKey]) -> String {
        var out = ""
        for key in codingPath {
            if let index = key.intValue {
                out += "[\(index)]"
            } else {
                out += out.isEmpty ? key.stringValue : ".\(key.stringValue)"
            }
        }
        return out
    }

    static func describe(_ error: DecodingError) -> String {
        switch error {
        case .keyNotFound(let key, let context):
            let field = path(context.codingPath + [key])
            return
                "missing field '\(field)'; a batch is {\"clientId\",\"sentAt\",\"changes\":[{\"id\",\"table\",\"op\",\"key\",\"values\",\"editedAt\",\"baseUpdatedAt\"}]}"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            return "field '\(path(context.codingPath))' has the wrong type: \(context.debugDescription)"
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty { return "the request body is not valid JSON" }
            return "field '\(path(context.codingPath))' is invalid: \(context.debugDescription)"
        @unknown default:
            return "the request body is not a change batch"
        }
    }
}
