import FerryCore
import Foundation
import Testing

@testable import FerryServer

@Suite("Status: the last hour of traffic in a ring of 60 one-minute buckets")
struct TrafficRecorderTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)  // a whole minute

    @Test("requests, bytes and upload decisions land in the minute they happened")
    func countsByMinute() {
        let traffic = TrafficRecorder()
        for status in [200, 200, 206, 304, 404, 401, 503, 101] { traffic.recordRequest(status: status, at: Self.start) }
        traffic.recordBytes(1000, at: Self.start.addingTimeInterval(59))
        traffic.recordBytes(24, at: Self.start.addingTimeInterval(60))
        traffic.recordUploads(
            ChangeResults(
                results: [.applied, .applied, .rejected, .gone, .invalid, .forbidden].map {
                    ChangeResult(id: UUID().uuidString, status: $0, row: nil, message: nil)
                }), at: Self.start)

        let window = traffic.window(endingAt: Self.start.addingTimeInterval(60))
        #expect(window.count == 60)
        let previous = window[58]
        let current = window[59]
        #expect(previous.minute == TrafficRecorder.minute(of: Self.start))
        #expect(
            [
                previous.ok, previous.partial, previous.notModified, previous.clientError, previous.serverError,
                previous.other,
            ] as [Int] == [2, 1, 1, 2, 1, 1])
        #expect(previous.bytes == 1000 && current.bytes == 24)
        #expect(
            [previous.applied, previous.rejected, previous.gone, previous.invalid, previous.forbidden] as [Int] == [
                2, 1, 1, 1, 1,
            ])
        #expect(window.dropLast(2).allSatisfy { $0 == TrafficRecorder.Bucket(minute: $0.minute) })
        #expect(zip(window, window.dropFirst()).allSatisfy { $1.minute == $0.minute + 1 })
    }

    @Test("after an hour a slot starts over, and stale slots read as zero")
    func wrapsAround() {
        let traffic = TrafficRecorder()
        traffic.recordRequest(status: 200, at: Self.start)
        traffic.recordRequest(status: 200, at: Self.start.addingTimeInterval(30 * 60))
        // 59 minutes later the first minute is still in the window, one more and it is gone
        #expect(traffic.window(endingAt: Self.start.addingTimeInterval(59 * 60)).map(\.ok).reduce(0, +) == 2)
        #expect(traffic.window(endingAt: Self.start.addingTimeInterval(60 * 60)).map(\.ok).reduce(0, +) == 1)
        // The same slot, an hour on: counted afresh, not added to the old minute's count
        traffic.recordRequest(status: 304, at: Self.start.addingTimeInterval(60 * 60))
        let window = traffic.window(endingAt: Self.start.addingTimeInterval(60 * 60))
        #expect(window.last?.notModified == 1 && window.last?.ok == 0)
        // Two hours of silence: all zeros
        #expect(
            traffic.window(endingAt: Self.start.addingTimeInterval(3 * 3600)).allSatisfy { $0.ok + $0.notModified == 0 }
        )
    }
}
