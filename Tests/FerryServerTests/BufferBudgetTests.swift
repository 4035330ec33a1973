import FerryCore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import FerryServer

/// All downloads together hold at most the buffer budget in chunks; with the smallest budget many downloads still
/// all finish, byte for byte (they take turns and cannot deadlock on each other).
@Suite struct BufferBudgetTests {
    @Test func manyDownloadsShareASmallBudget() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let v1 = try store.publish(blobBytes: 3 << 20)
        var configuration = store.configuration()
        configuration.chunkSize = 64 * 1024
        configuration.downloadBufferBytes = 2 * 64 * 1024  // two chunks for everyone
        try await store.withLiveServer(configuration) { client in
            try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        let response = try await client.execute(uri: "/v1/datasets/trips/versions/1", method: .get)
                        return sha256Hex(response.body)
                    }
                }
                for try await digest in group { #expect(digest == v1.sha256) }
            }
        }
    }

    @Test func slotsAreHandedOutInOrderAndReturned() async throws {
        let budget = BufferBudget(slots: 2)
        await budget.acquire()
        #expect(budget.tryAcquire())
        #expect(!budget.tryAcquire())
        let waiter = Task {
            await budget.acquire()
            return true
        }
        budget.release()
        #expect(await waiter.value)
        budget.release()
        budget.release()
        #expect(budget.tryAcquire() && budget.tryAcquire() && !budget.tryAcquire())
    }
}
