import FerryCore
import FerryStore
import Foundation
import HTTPTypes
import HummingbirdTesting
import Testing

@testable import FerryServer

/// The manifest long-poll (`Prefer: wait=N`, RFC 7240): held until a new version is served, 304 at the deadline,
/// `Preference-Applied` on every answer, answered 304 at once on graceful shutdown, and never answered early by
/// the channel's fast paths.
@Suite struct LongPollTests {
    struct Answer: Sendable {
        let status: Int
        let headers: [String: String]
        let body: String
        /// From sending the request to reading the whole response.
        let elapsed: Duration
    }

    /// One request on a fresh connection (or after `before`, a request answered first on the same connection, so
    /// the second reaches the HTTP decoder), read to the end of its body.
    static func request(
        _ port: Int, _ headers: [(String, String)], method: String = "GET",
        path: String = "/v1/datasets/trips/manifest", before: String? = nil
    ) async throws -> Answer {
        try await offPool {
            let connection = try RawHTTPConnection(port: port)
            connection.setTimeouts(seconds: 90)
            if let before {
                try connection.send("GET \(before) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                let head = try connection.readHead()
                _ = try connection.read(Int(head.headers["content-length"] ?? "0") ?? 0)
            }
            var text = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            for (name, value) in headers { text += "\(name): \(value)\r\n" }
            let start = ContinuousClock.now
            try connection.send(text + "\r\n")
            let head = try connection.readHead()
            let length = method == "HEAD" ? 0 : Int(head.headers["content-length"] ?? "0") ?? 0
            let body = String(decoding: try connection.read(length), as: UTF8.self)
            return Answer(status: head.status, headers: head.headers, body: body, elapsed: ContinuousClock.now - start)
        }
    }

    /// `ferry_manifest_waiting_requests` from `/metrics` (0 before the first wait).
    static func waiting(_ port: Int) async throws -> Int {
        let metrics = try await RevalidationTests.body(port, "/metrics")
        let line = metrics.split(separator: "\n").first { $0.hasPrefix("ferry_manifest_waiting_requests ") }
        return line.flatMap { Double($0.split(separator: " ")[1]) }.map { Int($0) } ?? 0
    }

    /// Waits (up to 60 s) until `count` long-polls wait on the server: the event the tests publish after.
    static func awaitWaiting(_ port: Int, _ count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while try await waiting(port) != count {
            guard ContinuousClock.now < deadline else {
                Issue.record("\(count) waiting requests expected, \(try await waiting(port)) after 60 s")
                return
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    @Test("Prefer: wait is read as RFC 7240 says: clamped to 60 s, first occurrence wins, anything unreadable ignored")
    func parsesPrefer() {
        #expect(WaitPreference("wait=30")?.seconds == 30)
        #expect(WaitPreference("WAIT = 5")?.seconds == 5)
        #expect(WaitPreference("respond-async, wait=7")?.seconds == 7)
        #expect(WaitPreference("wait=\"9\"; foo=bar")?.seconds == 9)
        #expect(WaitPreference("wait=600")?.seconds == 60)
        #expect(WaitPreference("wait=99999999999999999999999")?.seconds == 60)
        #expect(WaitPreference("wait=0")?.seconds == 0)
        #expect(WaitPreference("wait=3, wait=40")?.seconds == 3)
        #expect(WaitPreference("handling=\"a, wait=4\", wait=8")?.seconds == 8)
        #expect(WaitPreference("wait=30")?.applied == "wait=30")
        for malformed in ["wait=soon", "wait=-1", "wait", "wait=", "wait=1.5", "respond-async", "", ",,"] {
            #expect(WaitPreference(malformed) == nil, "\(malformed)")
        }
        #expect(WaitPreference(nil) == nil)
    }

    @Test("a long-poll returns the new manifest as soon as a version lands, and 304 at its deadline")
    func returnsWhenAVersionLands() async throws {
        // Given version 1, and a device that holds it
        let store = try TestStore()
        defer { store.remove() }
        let v1 = try store.publish()
        try await RevalidationTests.withServers(store.configuration) { channel, _, answers, _ in
            // When it asks for the manifest with `Prefer: wait=30` and version 2 is published while it waits
            let poll = Task {
                try await Self.request(channel, [("If-None-Match", "\"\(v1.sha256)\""), ("Prefer", "wait=30")])
            }
            try await Self.awaitWaiting(channel, 1)
            let published = ContinuousClock.now
            let v2 = try store.publish()
            let answer = try await poll.value

            // Then the answer is version 2's manifest, well before the deadline, with Preference-Applied
            #expect(answer.status == 200)
            #expect(answer.headers["ferry-version"] == "2" && answer.headers["etag"] == "\"\(v2.sha256)\"")
            #expect(answer.headers["preference-applied"] == "wait=30")
            #expect(try Manifest.decode(Data(answer.body.utf8)).version == 2)
            #expect(
                ContinuousClock.now - published < .seconds(10),
                "answered \(ContinuousClock.now - published) after the publish")
            #expect(answers.value == 0, "the channel answered a long-poll itself")
            #expect(try await Self.waiting(channel) == 0)

            // And a device that holds version 2 waits out a 1 s deadline, then gets the route's 304 with
            // Preference-Applied
            let idle = try await Self.request(channel, [("If-None-Match", "\"\(v2.sha256)\""), ("Prefer", "wait=1")])
            #expect(idle.status == 304 && idle.body.isEmpty)
            #expect(idle.headers["etag"] == "\"\(v2.sha256)\"" && idle.headers["cache-control"] == "no-cache")
            #expect(idle.headers["preference-applied"] == "wait=1")
            #expect(idle.elapsed >= .milliseconds(950) && idle.elapsed < .seconds(10), "\(idle.elapsed)")
        }
    }

    @Test("neither fast path answers a request with Prefer: the raw handler's and the decoder's both wait")
    func fastPathsDefer() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let v1 = try store.publish()
        try await RevalidationTests.withServers(store.configuration) { channel, router, answers, _ in
            let conditional = [("If-None-Match", "\"\(v1.sha256)\"")]
            // A plain revalidation is answered in the channel, at once (the anchor of what must not happen below)
            let plain = try await Self.request(channel, conditional)
            #expect(plain.status == 304 && answers.value == 1)
            #expect(plain.headers["preference-applied"] == nil)

            // On a fresh connection (RawNotModifiedHandler), after a first request (the decoder, then the router), GET and HEAD
            for (method, before) in [("GET", nil), ("GET", "/healthz"), ("HEAD", nil), ("HEAD", "/healthz")] {
                let answer = try await Self.request(
                    channel, conditional + [("Prefer", "wait=1")], method: method, before: before)
                #expect(
                    answer.status == 304 && answer.headers["preference-applied"] == "wait=1",
                    "\(method) after \(before ?? "nothing")")
                #expect(
                    answer.elapsed >= .milliseconds(950),
                    "\(method) after \(before ?? "nothing"): answered in \(answer.elapsed)")
            }
            #expect(answers.value == 1, "the channel answered a request with Prefer")

            // And the router-only server waits the same way
            let routed = try await Self.request(router, conditional + [("Prefer", "wait=1")])
            #expect(routed.status == 304 && routed.elapsed >= .milliseconds(950))
        }
    }

    @Test(
        "without Prefer nothing changes; a stale or absent If-None-Match is answered at once; an unreadable Prefer is ignored"
    )
    func answersAtOnceWhenNothingToWaitFor() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let v1 = try store.publish()
        let v2 = try store.publish()
        try await RevalidationTests.withServers(store.configuration) { channel, router, _, _ in
            for port in [channel, router] {
                // A device on version 1 asking to wait gets version 2 at once, saying which wait applied (clamped)
                let stale = try await Self.request(
                    port, [("If-None-Match", "\"\(v1.sha256)\""), ("Prefer", "wait=600")])
                #expect(stale.status == 200 && stale.headers["ferry-version"] == "2" && stale.elapsed < .seconds(10))
                #expect(stale.headers["preference-applied"] == "wait=60")

                // The same request without Prefer: the same answer, byte for byte, but for Preference-Applied
                let plain = try await Self.request(port, [("If-None-Match", "\"\(v1.sha256)\"")])
                var withoutApplied = stale.headers
                withoutApplied["preference-applied"] = nil
                withoutApplied["date"] = nil
                var plainHeaders = plain.headers
                plainHeaders["date"] = nil
                #expect(plain.status == 200 && plainHeaders == withoutApplied && plain.body == stale.body)

                // No If-None-Match: nothing to wait for
                let first = try await Self.request(port, [("Prefer", "wait=30")])
                #expect(
                    first.status == 200 && first.headers["preference-applied"] == "wait=30"
                        && first.elapsed < .seconds(10))

                // A Prefer the server cannot read is ignored: the plain 304, at once, with no Preference-Applied
                let unreadable = try await Self.request(
                    port, [("If-None-Match", "\"\(v2.sha256)\""), ("Prefer", "wait=soon")])
                #expect(
                    unreadable.status == 304 && unreadable.headers["preference-applied"] == nil
                        && unreadable.elapsed < .seconds(10))
                let plain304 = try await Self.request(port, [("If-None-Match", "\"\(v2.sha256)\"")])
                var a = unreadable.headers
                var b = plain304.headers
                a["date"] = nil
                b["date"] = nil
                #expect(a == b)
            }
        }
    }

    @Test("graceful shutdown answers every waiting request 304 at once")
    func shutdownAnswersWaiters() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let v1 = try store.publish()
        let polls = Locked<[Task<Answer, any Error>]>([])
        let shutdownStarted = Locked<ContinuousClock.Instant?>(nil)
        // Given three requests waiting up to 50 s on a live server
        try await store.withLiveServer { client in
            let port = try #require(client.port)
            for _ in 0..<3 {
                let task = Task {
                    try await Self.request(port, [("If-None-Match", "\"\(v1.sha256)\""), ("Prefer", "wait=50")])
                }
                polls.withLock { $0.append(task) }
            }
            try await Self.awaitWaiting(port, 3)
            // When the test body ends, HummingbirdTesting shuts the server down gracefully
            shutdownStarted.withLock { $0 = ContinuousClock.now }
        }
        // Then each waiter got a 304 with Preference-Applied, long before its deadline
        let started = try #require(shutdownStarted.current)
        for poll in polls.current {
            let answer = try await poll.value
            #expect(answer.status == 304 && answer.headers["preference-applied"] == "wait=50")
            #expect(answer.headers["etag"] == "\"\(v1.sha256)\"")
        }
        #expect(
            ContinuousClock.now - started < .seconds(40),
            "the shutdown waited \(ContinuousClock.now - started) for the long-polls")
    }
}

extension LongPollTests {
    @Test("a scoped dataset's long-poll checks the token first, exactly as without Prefer, then waits on its own scope")
    func scopedChecksTheTokenFirst() async throws {
        let world = try ScopedServerTests.World.make("longpoll-scoped")
        defer { world.close() }
        try await world.publish()
        let alice = try #require(try world.scoped().entry(for: "0"))
        try await world.withServer { client in
            let port = try #require(client.port)
            let path = "/v1/datasets/\(ScopedServerTests.dataset)/manifest"
            let conditional = [("If-None-Match", "\"\(alice.sha256)\""), ("Prefer", "wait=1")]
            // A wait far longer than any slack, so "at once" below is told from waiting on a busy machine
            let long = [("If-None-Match", "\"\(alice.sha256)\""), ("Prefer", "wait=30")]
            // Without a token, or with an unknown one: 401 at once, as without Prefer
            for token in [nil, "not-a-token"] {
                let refused = try await Self.request(
                    port, long + (token.map { [("Authorization", "Bearer \($0)")] } ?? []), path: path)
                #expect(
                    refused.status == 401 && refused.elapsed < .seconds(10)
                        && refused.headers["www-authenticate"] != nil, "\(token ?? "no token")")
            }
            // Alice's token: her scope's 304 at the deadline, private
            let waited = try await Self.request(
                port, conditional + [("Authorization", "Bearer alice-token")], path: path)
            #expect(waited.status == 304 && waited.elapsed >= .milliseconds(950))
            #expect(
                waited.headers["cache-control"] == "private, no-cache"
                    && waited.headers["preference-applied"] == "wait=1")
            // Bob's token with Alice's checksum: his scope's manifest at once
            let bob = try await Self.request(port, long + [("Authorization", "Bearer bob-token")], path: path)
            #expect(bob.status == 200 && bob.elapsed < .seconds(10) && bob.headers["etag"] != "\"\(alice.sha256)\"")
        }
    }
}
