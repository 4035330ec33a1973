import FerryCore
import Foundation

/// The bounded history (docs/delta.md, "A bounded history"): which versions of a scope's chain (its history and
/// retained versions) stay as points a device can stand on, by count and by time. Every one of the newest
/// ``recent`` versions stays; older ones stay only as the newest version of their window in UTC: 5 minutes while
/// younger than 2 hours, an hour while younger than 2 days, a day after that; checkpoints, the versions after the
/// newest checkpoint (the steps a whole file is built by) and the oldest version of the chain always stay. So a 30-day horizon keeps at most about 64 + 24 + 48 + 30 points
/// whatever the number of versions published, and a device standing between two points is never more than one
/// window of changes from the point before it. The windows nest, so a version a tier drops never comes back.
///
/// ```swift
/// let kept = HistoryTiers().keep(entry.chain, now: Date())
/// ```
public struct HistoryTiers: Sendable, Equatable {
    /// One tier: versions at least `minimumAge` seconds old keep one point per `window` seconds.
    public struct Tier: Sendable, Equatable {
        public var name: String
        public var minimumAge: Int
        public var window: Int

        public init(name: String, minimumAge: Int, window: Int) {
            self.name = name
            self.minimumAge = minimumAge
            self.window = window
        }
    }

    /// The newest versions kept whatever their age.
    public var recent = 64
    /// Coarser tiers, by increasing age.
    public var tiers = [
        Tier(name: "5m", minimumAge: 0, window: 300),
        Tier(name: "1h", minimumAge: 2 * 3_600, window: 3_600),
        Tier(name: "1d", minimumAge: 2 * 86_400, window: 86_400),
    ]

    public init() {}

    /// The name of the tier `chain[index]` falls in: `every` for the ``recent`` versions, else its tier's.
    public func tierName(of index: Int, in chain: [VersionRecord], now: Date) -> String {
        tier(of: index, in: chain, now: now)?.name ?? "every"
    }

    /// Whether each record of `chain` (oldest first) stays a point.
    public func keep(_ chain: [VersionRecord], now: Date) -> [Bool] {
        // The newest checkpoint and every version after it: a whole file of any of them is built from that
        // checkpoint by the steps exactly as published, and a merged step would build other bytes than the ones
        // recorded (the publisher cuts a checkpoint every ``Publisher/stepsPerCheckpoint`` versions instead).
        let newestCheckpoint = chain.lastIndex(where: \.isCheckpoint) ?? 0
        return chain.indices.map { index in
            if index == 0 || index >= newestCheckpoint || chain[index].isCheckpoint { return true }
            guard let tier = tier(of: index, in: chain, now: now), let mine = seconds(chain[index]),
                let next = seconds(chain[index + 1])
            else { return true }
            // The newest version of its window stays; one with a newer version in the same window goes.
            return mine / tier.window != next / tier.window
        }
    }

    /// Points per tier of `chain`, newest tier first, tiers without points left out.
    public func points(of chain: [VersionRecord], now: Date) -> [(name: String, points: Int)] {
        var counts: [String: Int] = [:]
        for index in chain.indices { counts[tierName(of: index, in: chain, now: now), default: 0] += 1 }
        return (["every"] + tiers.map(\.name)).compactMap { name in counts[name].map { (name, $0) } }
    }

    private func tier(of index: Int, in chain: [VersionRecord], now: Date) -> Tier? {
        guard chain.count - 1 - index >= recent, let created = seconds(chain[index]) else { return nil }
        let age = Int(now.timeIntervalSince1970) - created
        return tiers.last { age >= $0.minimumAge }
    }

    /// `createdAt` in seconds since 1970; nil when unreadable (such a record stays).
    private func seconds(_ record: VersionRecord) -> Int? {
        Timestamp.parseMillis(record.createdAt).map { Int($0 / 1000) }
    }
}
