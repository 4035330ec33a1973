import FerryCore
import Foundation
import Testing

@testable import FerryServer

/// A connection that revalidates the same URL again and again, as a device or a benchmark does: the channel answers
/// it from the answer it gave that connection last (`RawNotModifiedHandler.recall`), and that shortcut keeps every
/// rule of the memo: the answers come back in order and counted exactly, their date moves on with the clock, and a
/// publish retires them at once.
@Suite struct RevalidationConnectionTests {
    /// The status line and fields of the next response head on `connection`, and its Date line.
    static func nextHead(_ connection: RawHTTPConnection) throws -> (lines: [String], date: String?) {
        let lines = try connection.readHeadLines()
        return (lines.filter { !$0.hasPrefix("Date: ") }, lines.first { $0.hasPrefix("Date: ") })
    }

    @Test("one connection's repeated revalidations, pipelined or not: the same 304s, in order, each counted once")
    func repeatedOnOneConnection() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish()
        let conditional =
            "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"\(manifest.sha256)\"\r\n\r\n"
        try await RevalidationTests.withServers(store.configuration) { channel, router, answers, configuration in
            let routed = try await RevalidationTests.exchange(
                router, "GET", "/v1/datasets/trips/snapshot", [("If-None-Match", "\"\(manifest.sha256)\"")])
            try await offPool {
                let connection = try RawHTTPConnection(port: channel)
                connection.setTimeouts(seconds: 30)
                // One request, then five in one write, then one more
                try connection.send(conditional)
                var heads = [try Self.nextHead(connection)]
                try connection.send(String(repeating: conditional, count: 5))
                for _ in 0..<5 { heads.append(try Self.nextHead(connection)) }
                try connection.send(conditional)
                heads.append(try Self.nextHead(connection))
                for head in heads {
                    #expect(head.lines == ["HTTP/1.1 304 Not Modified"] + routed.fields)
                    #expect(RevalidationTests.isIMFDate(head.date), "\(head.date ?? "no Date")")
                }
            }
            // Each answered in the channel, all but the first from what it remembered, and each counted once
            #expect(answers.value == 7 && answers.remembered == 6)
            let traffic = configuration.dependencies.statusBoard.traffic.window(endingAt: Date()).reduce(0) {
                $0 + $1.notModified
            }
            #expect(traffic == 7)
            let metrics = try await RevalidationTests.body(channel, "/metrics")
            let pattern = "/v1/datasets/{dataset}/snapshot"
            #expect(metrics.contains(#"ferry_http_requests_total{route="\#(pattern)",status="304"} 7"#), "\(metrics)")
            #expect(metrics.contains(#"ferry_http_not_modified_total{route="\#(pattern)"} 7"#))
        }
    }

    @Test("a remembered 304 written again in a later second carries that second's date")
    func theDateMovesOn() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let manifest = try store.publish()
        let conditional =
            "GET /v1/datasets/trips/manifest HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"\(manifest.sha256)\"\r\n\r\n"
        try await RevalidationTests.withServers(store.configuration) { channel, _, answers, _ in
            try await offPool {
                let connection = try RawHTTPConnection(port: channel)
                connection.setTimeouts(seconds: 30)
                try connection.send(conditional + conditional)
                let first = try Self.nextHead(connection)
                let second = try Self.nextHead(connection)
                #expect(first.lines == second.lines && first.lines.first == "HTTP/1.1 304 Not Modified")
                // Ask again on the same connection until the server's clock has passed the first answer's second
                let start = Date()
                var later = second
                while later.date == first.date, Date().timeIntervalSince(start) < 5 {
                    try connection.send(conditional)
                    later = try Self.nextHead(connection)
                    #expect(later.lines == first.lines)
                }
                #expect(later.date != first.date && RevalidationTests.isIMFDate(later.date), "\(later.date ?? "")")
                // The new date is the server's clock now, not an old text: it parses to within a second of now
                let format = DateFormatter()
                format.locale = Locale(identifier: "en_US_POSIX")
                format.timeZone = TimeZone(identifier: "GMT")
                format.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
                let text = try #require(later.date)
                let sent = try #require(format.date(from: String(text.dropFirst(6))))
                #expect(abs(sent.timeIntervalSinceNow) < 2)
            }
            #expect(answers.remembered == answers.value - 1)
        }
    }

    @Test("after a publish, the connection that revalidated the old version gets the new one from the router")
    func aPublishRetiresTheConnectionsAnswer() async throws {
        let store = try TestStore()
        defer { store.remove() }
        let first = try store.publish()
        let old =
            "GET /v1/datasets/trips/snapshot HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"\(first.sha256)\"\r\n\r\n"
        try await RevalidationTests.withServers(store.configuration) { channel, _, answers, _ in
            let connection = try RawHTTPConnection(port: channel)
            connection.setTimeouts(seconds: 30)
            try await offPool {
                try connection.send(old + old)
                #expect(try connection.readHead().status == 304)
                #expect(try connection.readHead().status == 304)
            }
            #expect(answers.value == 2 && answers.remembered == 1)

            // When version 2 is published and the server has loaded it
            let second = try store.publish()
            let deadline = ContinuousClock.now + .seconds(5)
            while try await RevalidationTests.exchange(
                channel, "GET", "/v1/datasets/trips/manifest", [("If-None-Match", "\"\(second.sha256)\"")]
            ).status != 304, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            let before = answers.value

            // Then the same bytes on the same connection get version 2, from the router
            try await offPool {
                try connection.send(old)
                let head = try connection.readHead()
                #expect(head.status == 200 && head.headers["etag"] == "\"\(second.sha256)\"", "\(head)")
            }
            #expect(answers.value == before)
        }
    }
}
