import FerryCore
import Foundation
import HTTPTypes

extension HTTPField.Name {
    /// `Ferry-Client`: the client's name and version (`ferry/0.9.0`), kept in the fleet (``DeviceNote/client``).
    static let ferryClient = HTTPField.Name("Ferry-Client")!
    /// `Ferry-Outbox`: how many edits the device still holds to upload (optional).
    static let ferryOutbox = HTTPField.Name("Ferry-Outbox")!
    /// `Ferry-Last-Error`: the device's last local error, in a line (optional).
    static let ferryLastError = HTTPField.Name("Ferry-Last-Error")!
}

/// What the server learnt about one device of one dataset since the fleet was last written to PostgreSQL
/// (``DeviceFleet``): every field is the latest value seen, nil when nothing new was seen. Notes of the same device
/// coalesce in memory (``merge(_:)``), so a device revalidating every second costs one row write per flush.
struct DeviceNote: Sendable, Equatable, Codable {
    /// The answers of the device's last push, by status (`applied`, `merged`, `rejected`, `gone`, `invalid`,
    /// `forbidden`).
    struct Push: Sendable, Equatable, Codable, ChangeTally {
        var applied = 0
        var merged = 0
        var rejected = 0
        var gone = 0
        var invalid = 0
        var forbidden = 0

        init(_ results: [ChangeResult]) {
            for result in results { count(result.status) }
        }
    }

    var lastSeen: Date
    /// The version the device last asked for (a version, a patch's target, or the latest snapshot's).
    var askedVersion: Int?
    /// The version the device last downloaded in full or by patch, or confirmed it holds (a 304 on it).
    var heldVersion: Int?
    /// How it came by ``heldVersion``: `full`, `patch` or `current` (a 304).
    var heldHow: String?
    var heldAt: Date?
    /// The scope its token maps to (scoped datasets).
    var scope: String?
    /// Its `Ferry-Client` header.
    var client: String?
    /// Its `Ferry-Outbox` header.
    var outbox: Int?
    /// Its `Ferry-Last-Error` header.
    var localError: String?
    var push: Push?
    var pushAt: Date?
    /// The last error status the server answered it (401, 403, 410, 413, …), its code and when.
    var errorStatus: Int?
    var errorCode: String?
    var errorAt: Date?

    init(lastSeen: Date) {
        self.lastSeen = lastSeen
    }

    /// The note with the request headers' optional client fields: `Ferry-Client` (at most 64 printable ASCII
    /// characters), `Ferry-Outbox` (a count) and `Ferry-Last-Error` (cut to 200 characters); a malformed value is
    /// ignored.
    init(headers: HTTPFields, now: Date) {
        self.init(lastSeen: now)
        if let value = headers[.ferryClient], Self.isPrintable(value), value.utf8.count <= 64 { client = value }
        if let value = headers[.ferryOutbox], let count = Int(value), (0...1_000_000_000).contains(count) {
            outbox = count
        }
        if let value = headers[.ferryLastError], Self.isPrintable(value), !value.isEmpty {
            localError = String(value.prefix(200))
        }
    }

    /// Takes every field `newer` has.
    mutating func merge(_ newer: DeviceNote) {
        lastSeen = max(lastSeen, newer.lastSeen)
        askedVersion = newer.askedVersion ?? askedVersion
        if newer.heldVersion != nil {
            heldVersion = newer.heldVersion
            heldHow = newer.heldHow
            heldAt = newer.heldAt
        }
        scope = newer.scope ?? scope
        client = newer.client ?? client
        outbox = newer.outbox ?? outbox
        localError = newer.localError ?? localError
        if newer.push != nil {
            push = newer.push
            pushAt = newer.pushAt
        }
        if newer.errorStatus != nil {
            errorStatus = newer.errorStatus
            errorCode = newer.errorCode
            errorAt = newer.errorAt
        }
    }

    static func isPrintable(_ value: String) -> Bool {
        value.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F }
    }
}

/// A device of a dataset: the fleet's key.
struct DeviceKey: Hashable, Sendable {
    let dataset: String
    let device: String
}
