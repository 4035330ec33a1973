import FerryCore
import Foundation
import HTTPTypes

extension HTTPField.Name {
    /// `Ferry-Device`: the random id a client makes once per client directory and sends with each request.
    static let ferryDevice = HTTPField.Name("Ferry-Device")!
}

/// The devices seen per dataset (a schema line counts as its own dataset), by their `Ferry-Device` id: for the
/// status page's "devices in the last 24 h", which tells an operator when few devices still use an old schema line
/// (docs/schema-lines.md). The id is a random value per client directory, never a personal datum; only it and the
/// time it was last seen are kept, in memory, for at most 24 h, and at most ``limit`` ids per dataset (past it,
/// the oldest sightings are dropped first, so the count is then a lower bound).
///
/// With a fleet (``DeviceFleet``, on a server with a database) it also gathers, per device, what the fleet keeps
/// (``DeviceNote``), under the same lock as the sighting, until the fleet takes them (``takeNotes()``) to write them
/// to PostgreSQL; at most ``noteLimit`` devices wait at once (past it, a new device's notes wait for the next flush,
/// and are dropped if it never comes back), so a flood of made-up ids costs no more memory than that.
final class DeviceSightings: Sendable {
    static let window: TimeInterval = 24 * 3600
    let limit: Int
    /// Devices whose notes may wait for the fleet at once.
    let noteLimit: Int
    private struct State {
        var seen: [String: [String: Date]] = [:]
        /// Nil until a fleet collects notes.
        var notes: [DeviceKey: DeviceNote]?
        var dropped = 0
    }
    private let state = Locked(State())

    init(limit: Int = 100_000, noteLimit: Int = 20_000) {
        self.limit = limit
        self.noteLimit = noteLimit
    }

    /// Starts gathering notes for a fleet (``takeNotes()`` takes them).
    func collectNotes() {
        state.withLock { if $0.notes == nil { $0.notes = [:] } }
    }

    /// The notes gathered since the last call, and how many new devices were left out for the bound.
    func takeNotes() -> (notes: [DeviceKey: DeviceNote], dropped: Int) {
        state.withLock { state in
            guard let notes = state.notes else { return ([:], 0) }
            defer {
                state.notes = [:]
                state.dropped = 0
            }
            return (notes, state.dropped)
        }
    }

    /// Adds `note` to the device's pending note (nothing without a fleet, or a malformed id).
    func note(id: String?, dataset: String, _ note: DeviceNote) {
        guard let id, Self.isValid(id) else { return }
        state.withLock { Self.add(note, key: DeviceKey(dataset: dataset, device: id), to: &$0, limit: noteLimit) }
    }

    private static func add(_ note: DeviceNote, key: DeviceKey, to state: inout State, limit: Int) {
        guard state.notes != nil else { return }
        if state.notes![key] != nil {
            state.notes![key]!.merge(note)
        } else if state.notes!.count < limit {
            state.notes![key] = note
        } else {
            state.dropped += 1
        }
    }

    /// Records the request's `Ferry-Device` id for `dataset`; a missing or malformed id (not 1-64 characters of
    /// `A-Z a-z 0-9 -`) is ignored.
    /// With a fleet, it also notes the headers' `Ferry-Client`, `Ferry-Outbox` and `Ferry-Last-Error`.
    func record(_ headers: HTTPFields, dataset: String, now: Date = Date()) {
        guard let id = headers[.ferryDevice], Self.isValid(id) else { return }
        let key = DeviceKey(dataset: dataset, device: id)
        let limit = self.limit
        let noteLimit = self.noteLimit
        state.withLock { state in
            Self.see(id, dataset: dataset, now: now, in: &state.seen, limit: limit)
            if state.notes != nil {
                Self.add(DeviceNote(headers: headers, now: now), key: key, to: &state, limit: noteLimit)
            }
        }
    }

    /// Records `id` (a `Ferry-Device` value) for `dataset`; nil or malformed is ignored.
    func record(id: String?, dataset: String, now: Date = Date()) {
        guard let id, Self.isValid(id) else { return }
        let limit = self.limit
        let noteLimit = self.noteLimit
        state.withLock { state in
            Self.see(id, dataset: dataset, now: now, in: &state.seen, limit: limit)
            if state.notes != nil {
                Self.add(
                    DeviceNote(lastSeen: now), key: DeviceKey(dataset: dataset, device: id), to: &state,
                    limit: noteLimit)
            }
        }
    }

    private static func see(
        _ id: String, dataset: String, now: Date, in all: inout [String: [String: Date]], limit: Int
    ) {
        all[dataset, default: [:]][id] = now
        if all[dataset]!.count > limit { prune(&all[dataset]!, now: now, limit: limit) }
    }

    /// Distinct ids seen for each dataset in the last 24 h.
    func counts(now: Date = Date()) -> [String: Int] {
        let since = now.addingTimeInterval(-Self.window)
        return state.withLock { state in
            for key in state.seen.keys { state.seen[key] = state.seen[key]!.filter { $0.value >= since } }
            state.seen = state.seen.filter { !$0.value.isEmpty }
            return state.seen.mapValues(\.count)
        }
    }

    /// Drops sightings older than the window, then the oldest until a tenth of `limit` is free.
    static func prune(_ ids: inout [String: Date], now: Date, limit: Int) {
        let since = now.addingTimeInterval(-window)
        ids = ids.filter { $0.value >= since }
        guard ids.count > limit else { return }
        let keep = ids.sorted { $0.value > $1.value }.prefix(limit - limit / 10)
        ids = Dictionary(uniqueKeysWithValues: keep.map { ($0.key, $0.value) })
    }

    static func isValid(_ id: String) -> Bool {
        (1...64).contains(id.utf8.count)
            && id.utf8.allSatisfy { c in
                (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z"))
                    || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9")) || c == UInt8(ascii: "-")
            }
    }
}

extension DeviceSightings {
    /// How many devices' notes wait for the fleet now.
    var pendingCount: Int { state.withLock { $0.notes?.count ?? 0 } }
}
