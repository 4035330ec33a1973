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
final class DeviceSightings: Sendable {
    static let window: TimeInterval = 24 * 3600
    let limit: Int
    private let seen = Locked([String: [String: Date]]())

    init(limit: Int = 100_000) {
        self.limit = limit
    }

    /// Records the request's `Ferry-Device` id for `dataset`; a missing or malformed id (not 1-64 characters of
    /// `A-Z a-z 0-9 -`) is ignored.
    func record(_ headers: HTTPFields, dataset: String, now: Date = Date()) {
        record(id: headers[.ferryDevice], dataset: dataset, now: now)
    }

    /// Records `id` (a `Ferry-Device` value) for `dataset`; nil or malformed is ignored.
    func record(id: String?, dataset: String, now: Date = Date()) {
        guard let id, Self.isValid(id) else { return }
        seen.withLock { all in
            all[dataset, default: [:]][id] = now
            if all[dataset]!.count > limit { Self.prune(&all[dataset]!, now: now, limit: limit) }
        }
    }

    /// Distinct ids seen for each dataset in the last 24 h.
    func counts(now: Date = Date()) -> [String: Int] {
        let since = now.addingTimeInterval(-Self.window)
        return seen.withLock { all in
            for key in all.keys { all[key] = all[key]!.filter { $0.value >= since } }
            all = all.filter { !$0.value.isEmpty }
            return all.mapValues(\.count)
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
