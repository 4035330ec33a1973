import AsyncHTTPClient
import FerryClientNIO
import FerryCore
import FerryPublisher
import FerryServer
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import FerryClient

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `FerryClient.watch` and `Configuration.download.waitForChanges` against the real server (and a server that ignores
/// `Prefer`): each version arrives through the manifest long-poll, moments after it is published.
@Suite(.serialized) struct WatchTests {
    @Test(
        "the watch loop's pacing: at once after a long-poll, bounded against a server that ignores the wait, Retry-After honoured"
    )
    func pacing() {
        let status = ClientStatus(state: .upToDate)
        var check = FetchResult.Check(status: status)
        // A long-poll the server held: the next one at once
        check.waitApplied = 30
        var notModified = FetchResult.notModified(check)
        #expect(WatchPacing.pause(after: notModified, elapsed: .seconds(30), pollInterval: .seconds(30)) == .zero)
        // A 304 at once although a wait was applied (a restarting server): still at most one check a second
        #expect(
            WatchPacing.pause(after: notModified, elapsed: .milliseconds(100), pollInterval: .seconds(30))
                == .milliseconds(900))
        // A server that ignores Prefer: once per poll interval
        check.waitApplied = nil
        notModified = .notModified(check)
        #expect(
            WatchPacing.pause(after: notModified, elapsed: .milliseconds(10), pollInterval: .seconds(30)) == .seconds(
                30) - .milliseconds(10))
        // Retry-After longer than the interval wins
        check.retryAfter = 120
        notModified = .notModified(check)
        #expect(WatchPacing.pause(after: notModified, elapsed: .zero, pollInterval: .seconds(30)) == .seconds(120))
        // A new version: the next check at once (the download took longer than a second)
        let downloaded = FetchResult.updateDownloaded(
            .init(
                version: 2, sha256: "", fileBytes: 10, publishedBytes: 10, encoding: .gzip, path: .full,
                check: .init(status: status, bytesReceived: 10)))
        #expect(WatchPacing.pause(after: downloaded, elapsed: .seconds(2), pollInterval: .seconds(30)) == .zero)

        // Backoff: doubling to the cap, each between half and all of its ceiling
        var low = WatchPacing.Backoff(random: { $0.lowerBound })
        #expect((0..<8).map { _ in low.next() } == [0.5, 1, 2, 4, 8, 16, 30, 30].map { Duration.seconds($0) })
        var high = WatchPacing.Backoff(random: { $0.upperBound })
        #expect((0..<3).map { _ in high.next() } == [1, 2, 4].map { Duration.seconds($0) })
        high.reset()
        #expect(high.next() == .seconds(1))
        #expect(ManifestPacing.waitSeconds(.milliseconds(1500)) == 2 && ManifestPacing.waitSeconds(.seconds(600)) == 60)
        #expect(ManifestPacing.waitSeconds(nil) == nil && ManifestPacing.waitSeconds(.zero) == nil)
        #expect(
            ManifestPacing.appliedWait("respond-async, wait=12") == 12
                && ManifestPacing.appliedWait("handling=lenient") == nil)
    }
}

extension WatchTests {
    /// The `/metrics` gauge of waiting long-polls of the server at `url`.
    static func waiting(_ url: URL) async throws -> Int {
        let response = try await HTTPClient.shared.execute(
            HTTPClientRequest(url: url.appendingPathComponent("metrics").absoluteString), timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 1 << 20)
        let line = String(buffer: body).split(separator: "\n").first {
            $0.hasPrefix("ferry_manifest_waiting_requests ")
        }
        return line.flatMap { Double($0.split(separator: " ")[1]) }.map { Int($0) } ?? 0
    }

    @Test(
        "checkForUpdates with waitForChanges long-polls through the transport: 304 at the deadline, the new version as it lands",
        arguments: TransportKind.allCases)
    func longPollThroughTransport(_ kind: TransportKind) async throws {
        let temp = try TemporaryDirectory("ferry-longpoll")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        try fixtures.publish(rows: 5)
        try await withFerryServer(store: fixtures.store.root) { url, _ in
            func open(wait: Duration) async throws -> FerryClient {
                var configuration = FerryClient.Configuration(
                    directory: temp.appending("device"), serverURL: url, dataset: fixtures.dataset)
                configuration.push.onOpen = false
                configuration.download.waitForChanges = wait
                return try await FerryClient.open(configuration: configuration.using(kind.shared), logger: .test)
            }
            // Given a device with version 1 that waits 1 s per check
            var client = try await open(wait: .seconds(1))
            #expect(try await client.checkForUpdates().outcome == .initialSync)
            // Then a check with nothing new ends at the deadline, and says the server applied the wait
            let started = ContinuousClock.now
            let idle = try await client.checkForUpdates()
            #expect(idle.outcome == .notModified && idle.check.waitApplied == 1)
            #expect(ContinuousClock.now - started >= .milliseconds(950))
            await client.close()

            // When a device waiting 50 s sees version 2 published meanwhile
            client = try await open(wait: .seconds(50))
            let device = client
            let check = Task { try await device.checkForUpdates() }
            let deadline = ContinuousClock.now + .seconds(20)
            while try await Self.waiting(url) != 1, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            let published = ContinuousClock.now
            try fixtures.publish(rows: 6)
            // Then the check brings version 2 within moments, not 50 s
            let result = try await check.value
            #expect(
                result.outcome == .updateDownloaded && result.download?.version == 2 && result.check.waitApplied == 50)
            #expect(ContinuousClock.now - published < .seconds(10))
            await client.close()
        }
    }

    @Test("against a server that ignores Prefer, the watch loop asks once per waitForChanges, or as Retry-After says")
    func serverIgnoringPreferIsPolledAtABoundedRate() async throws {
        for retryAfter in [nil, 3] as [Int?] {
            let temp = try TemporaryDirectory("ferry-ignores-prefer")
            defer { temp.remove() }
            // A server that answers every manifest request 304 at once, without Preference-Applied
            let times = Locked<[ContinuousClock.Instant]>([])
            let prefers = Locked<[String?]>([])
            let router = Router(context: BasicRequestContext.self)
            router.get("/v1/datasets/trips/manifest") { request, _ -> Response in
                times.withLock { $0.append(ContinuousClock.now) }
                var headers: HTTPFields = [.eTag: "\"\(String(repeating: "a", count: 64))\""]
                if let retryAfter { headers[.retryAfter] = String(retryAfter) }
                prefers.withLock { $0.append(request.headers[HTTPField.Name("Prefer")!]) }
                return Response(status: .notModified, headers: headers)
            }
            try await Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0))).test(
                .live
            ) { server in
                var configuration = FerryClient.Configuration(
                    directory: temp.appending("device"), serverURL: URL(string: "http://127.0.0.1:\(server.port!)")!,
                    dataset: "trips")
                configuration.push.onOpen = false
                configuration.download.waitForChanges = .seconds(2)
                let client = try await FerryClient.open(
                    configuration: configuration.using(AsyncHTTPClientTransport()), logger: .test)
                let watching = Task { try await client.watch { _ in } }
                // Wait for the third request (the event), then stop the loop
                let deadline = ContinuousClock.now + .seconds(30)
                while times.current.count < 3, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
                watching.cancel()
                try await watching.value
                await client.close()
            }
            let seen = times.current
            #expect(seen.count >= 3)
            #expect(prefers.current.allSatisfy { $0 == "wait=2" }, "\(prefers.current)")
            // The server's receive times carry scheduling delay on a busy machine, so the gap may look shorter than
            // the client waited; what this rules out is asking again at once
            let expected: Duration = .seconds(retryAfter ?? 2) - .milliseconds(700)
            for (a, b) in zip(seen, seen.dropFirst()) {
                #expect(
                    b - a >= expected, "requests \(b - a) apart; Retry-After \(retryAfter.map(String.init) ?? "none")")
            }
        }
    }
}
