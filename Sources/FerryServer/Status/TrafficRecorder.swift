import FerryCore
import Foundation

/// The last hour of traffic in one-minute buckets: a ring of 60 fixed slots, so memory never grows with traffic
/// or uptime. Slot `minute % 60` holds that minute's counts; a slot whose minute is stale is reset before it is
/// counted into again, and ``window(endingAt:)`` leaves stale slots out, so an idle hour reads as zeros.
///
/// Every count takes one short lock; the status page reads a copy.
///
/// ```swift
/// let traffic = TrafficRecorder()
/// traffic.recordRequest(status: 200)
/// traffic.recordBytes(4096)
/// let lastHour = traffic.window(endingAt: Date())   // 60 buckets, oldest first
/// ```
final class TrafficRecorder: Sendable {
    /// One minute's counts (``StatusReport/Counts``: requests by answer, bytes sent, uploads by decision).
    /// `minute` is whole minutes since 1970 (UTC); `bucket.ok`, `bucket.bytes`, … read and write the counts.
    @dynamicMemberLookup
    struct Bucket: Sendable, Equatable, Codable {
        var minute: Int64
        var counts = StatusReport.Counts()

        init(minute: Int64) { self.minute = minute }

        subscript<T>(dynamicMember keyPath: WritableKeyPath<StatusReport.Counts, T>) -> T {
            get { counts[keyPath: keyPath] }
            set { counts[keyPath: keyPath] = newValue }
        }
    }

    /// How many one-minute buckets the ring holds.
    static let minutes = 60

    private let slots = Locked([Bucket](repeating: Bucket(minute: -1), count: TrafficRecorder.minutes))

    init() {}

    /// Counts one answered request by its status code.
    func recordRequest(status: Int, at date: Date = Date()) {
        update(at: date) { bucket in
            switch status {
            case 200: bucket.ok += 1
            case 206: bucket.partial += 1
            case 304: bucket.notModified += 1
            case 400..<500: bucket.clientError += 1
            case 500..<600: bucket.serverError += 1
            default: bucket.other += 1
            }
        }
    }

    /// Counts body bytes sent.
    func recordBytes(_ count: Int, at date: Date = Date()) {
        guard count > 0 else { return }
        update(at: date) { $0.bytes += Int64(count) }
    }

    /// Counts each change of an upload by the decision it got.
    func recordUploads(_ results: ChangeResults, at date: Date = Date()) {
        guard !results.results.isEmpty else { return }
        update(at: date) { bucket in
            for result in results.results {
                switch result.status {
                case .applied: bucket.applied += 1
                case .rejected, .merged: bucket.rejected += 1
                case .gone: bucket.gone += 1
                case .invalid: bucket.invalid += 1
                case .forbidden: bucket.forbidden += 1
                }
            }
        }
    }

    /// The 60 minutes up to and including the one containing `now`, oldest first; minutes without traffic are
    /// zero buckets.
    func window(endingAt now: Date) -> [Bucket] {
        let current = Self.minute(of: now)
        let copy = slots.current
        return ((current - Int64(Self.minutes) + 1)...current).map { minute in
            let slot = copy[Self.index(minute)]
            return slot.minute == minute ? slot : Bucket(minute: minute)
        }
    }

    private func update(at date: Date, _ body: (inout Bucket) -> Void) {
        let minute = Self.minute(of: date)
        slots.withLock { slots in
            let index = Self.index(minute)
            if slots[index].minute != minute {
                // An older minute's count (or a clock stepped back over it): the slot starts over.
                slots[index] = Bucket(minute: minute)
            }
            body(&slots[index])
        }
    }

    static func minute(of date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 / 60).rounded(.down))
    }

    private static func index(_ minute: Int64) -> Int {
        Int(((minute % Int64(minutes)) + Int64(minutes)) % Int64(minutes))
    }
}
