import FerryCore
import FerryServer
import FerryStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Bad networks as a device meets them, tried as a new user would, through the real `ferry fetch`: each answers
/// with a clear message and exit code, in bounded time, and none changes database.db. Every test runs against both
/// transports (`ferry fetch --transport`): URLSession, what an app uses, and AsyncHTTPClient, the CLI's default.
@Suite struct BadNetworkTests {
    /// The real Ferry routes behind a front that misbehaves as told: busy with `Retry-After`, a captive portal's
    /// page, or a proxy that strips `ETag`.
    struct Front<Inner: HTTPResponder>: HTTPResponder where Inner.Context == BasicRequestContext {
        enum Mode: Sendable {
            case pass
            case busy(retryAfter: Int, times: Int)
            case failing(retryAfter: Int?)
            case captivePortal, stripETag
        }
        /// One answer the front gave: the path asked for, the request's `Accept-Encoding`, the status and the body
        /// bytes it announced.
        struct Answer: Sendable {
            var path: String
            var acceptEncoding: String?
            var status: Int
            var bodyBytes: Int
        }
        actor State {
            var mode: Mode = .pass
            var busyAnswers = 0
            private(set) var answers: [Answer] = []
            func set(_ mode: Mode) { self.mode = mode }
            func record(_ answer: Answer) { answers.append(answer) }
            /// Forgets the answers so far (so a test counts only its own requests).
            func clearAnswers() { answers = [] }
            func next() -> Mode {
                if case .busy(let seconds, let times) = mode {
                    if times <= 1 { mode = .pass } else { mode = .busy(retryAfter: seconds, times: times - 1) }
                    busyAnswers += 1
                    return .busy(retryAfter: seconds, times: times)
                }
                return mode
            }
        }
        let inner: Inner
        let state = State()

        func respond(to request: Request, context: BasicRequestContext) async throws -> Response {
            let response = try await answer(request, context: context)
            let bytes = response.headers[.contentLength].flatMap { Int($0) } ?? 0
            await state.record(
                Answer(
                    path: request.uri.path, acceptEncoding: request.headers[.acceptEncoding],
                    status: Int(response.status.code), bodyBytes: bytes))
            return response
        }

        func answer(_ request: Request, context: BasicRequestContext) async throws -> Response {
            switch await state.next() {
            case .failing(let seconds):
                var headers = HTTPFields()
                if let seconds { headers[.retryAfter] = String(seconds) }
                headers[.contentType] = "text/plain"
                return Response(
                    status: .internalServerError, headers: headers,
                    body: .init(byteBuffer: ByteBuffer(string: "Internal Server Error")))
            case .busy(let seconds, _):
                var headers = HTTPFields()
                headers[.retryAfter] = String(seconds)
                headers[.contentType] = "application/json"
                return Response(
                    status: .serviceUnavailable, headers: headers,
                    body: .init(byteBuffer: ByteBuffer(string: #"{"error":{"code":"unavailable","message":"busy"}}"#)))
            case .captivePortal:
                var headers = HTTPFields()
                headers[.contentType] = "text/html"
                return Response(
                    status: .ok, headers: headers,
                    body: .init(
                        byteBuffer: ByteBuffer(
                            string: "<!doctype html><html><body>Sign in to Airport Wi-Fi</body></html>")))
            case .stripETag:
                var response = try await inner.respond(to: request, context: context)
                response.headers[.eTag] = nil
                return response
            case .pass:
                return try await inner.respond(to: request, context: context)
            }
        }
    }

    /// A device at version 1 and a store with version 2 waiting, behind a `Front`.
    static func withDevice(
        _ kind: TransportKind,
        _ body:
            @Sendable (
                _ url: URL, _ front: Front<RouterResponder<BasicRequestContext>>.State, _ dir: String,
                _ published: [Manifest]
            ) async throws -> Void
    ) async throws {
        let temp = try TemporaryDirectory("bad-network")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        let v1 = try fixtures.publish(rows: 4)
        let configuration = ServerConfiguration(storePath: fixtures.store.root, port: 0)
        let catalog = SnapshotCatalog(store: fixtures.store, pollInterval: .seconds(1), logger: .test)
        let router = try buildRouter(configuration, catalog: catalog, logger: .test)
        let front = Front(inner: router.buildResponder())
        let app = Application(
            responder: front, configuration: .init(address: .hostname("127.0.0.1", port: 0)), logger: .test)
        try await app.test(.live) { client in
            let url = URL(string: "http://127.0.0.1:\(client.port!)")!
            let dir = temp.appending("device").path
            try await catalog.refresh()
            let first = try await runFerry(
                ["fetch", "--server", url.absoluteString, "--dataset", "trips", "--dir", dir] + kind.cliArguments)
            #expect(first.status == 0, "\(first.stderr)")
            // The CLI used the transport asked for: URLSession asks for the SQLite file itself, AsyncHTTPClient for
            // gzip.
            let download = await front.state.answers.first { !$0.path.hasSuffix("/manifest") }
            #expect(
                download?.acceptEncoding?.contains(kind.carriesGzip ? "gzip" : "identity") == true,
                "\(String(describing: download))")
            await front.state.clearAnswers()
            let v2 = try fixtures.publish(rows: 6)
            try await catalog.refresh()
            try await body(url, front.state, dir, [v1, v2])
        }
    }

    static func fetch(_ kind: TransportKind, _ url: URL, _ dir: String, _ extra: [String] = []) async throws -> (
        ProcessResult, Duration
    ) {
        let start = ContinuousClock.now
        let result = try await runFerry(
            ["fetch", "--server", url.absoluteString, "--dataset", "trips", "--dir", dir, "--apply"] + kind.cliArguments
                + extra)
        return (result, ContinuousClock.now - start)
    }

    static func version(_ dir: String, _ published: [Manifest]) throws -> Int? {
        try publishedVersion(of: URL(fileURLWithPath: dir).appendingPathComponent("database.db"), among: published)
    }

    /// What "none may change database.db" compares: its bytes (SHA-256), its inode and its modification time.
    struct Fingerprint: Equatable, CustomStringConvertible {
        var sha256: String
        var inode: UInt64
        var modified: Date
        var description: String { "sha256 \(sha256.prefix(12)) inode \(inode) mtime \(modified.timeIntervalSince1970)" }
    }

    static func expectUnchanged(_ dir: String, _ held: Fingerprint, sourceLocation: SourceLocation = #_sourceLocation)
        throws
    {
        let now = try fingerprint(dir)
        #expect(now == held, "database.db changed: \(now), was \(held)", sourceLocation: sourceLocation)
    }

    static func fingerprint(_ dir: String) throws -> Fingerprint {
        let database = URL(fileURLWithPath: dir).appendingPathComponent("database.db")
        let attributes = try FileManager.default.attributesOfItem(atPath: database.path)
        return Fingerprint(
            sha256: sha256Hex(Array(try Data(contentsOf: database))),
            inode: try #require((attributes[.systemFileNumber] as? NSNumber)?.uint64Value),
            modified: try #require(attributes[.modificationDate] as? Date))
    }

    @Test(
        "a refused connection is offline at once; a server that never answers times out as configured; neither changes database.db",
        arguments: TransportKind.allCases)
    func refusedAndSilent(_ kind: TransportKind) async throws {
        try await Self.withDevice(kind) { _, _, dir, published in
            // Given a device that holds version 1 (fetched from a good server)
            #expect(try Self.version(dir, published) == 1)
            let held = try Self.fingerprint(dir)

            // A port nothing listens on
            let closed = try Self.freePort()
            let (refused, refusedTime) = try await Self.fetch(kind, URL(string: "http://127.0.0.1:\(closed)")!, dir)
            #expect(refused.status == 1 && refused.stderr.contains("offline"), "\(refused.stderr)")
            // At once: no retry and no timeout (the slack is a busy 2-core machine starting a process)
            #expect(refusedTime < .seconds(10), "took \(refusedTime)")
            try Self.expectUnchanged(dir, held)

            // A listener that accepts (the kernel completes the handshake) and never answers
            let (socket, port) = try Self.silentListener()
            defer { close(socket) }
            let (silent, silentTime) = try await Self.fetch(
                kind, URL(string: "http://127.0.0.1:\(port)")!, dir, ["--read-timeout", "1"])
            #expect(silent.status == 1, "\(silent.stderr)")
            #expect(
                silent.stderr.contains("offline") || silent.stderr.contains("timed out")
                    || silent.stderr.contains("timeout"), "\(silent.stderr)")
            #expect(silentTime < .seconds(15), "took \(silentTime)")
            try Self.expectUnchanged(dir, held)
            #expect(try Self.version(dir, published) == 1)
        }
    }

    /// An unreachable host: SYNs go unanswered, so only the connect timeout ends the attempt.
    ///
    /// Measured in this sandbox first: every off-link address (10.255.255.1, TEST-NET 203.0.113.1, 240.0.0.1, ...)
    /// is answered at once by the sandbox's network (connected in 1 ms), and an unused on-link address (192.0.2.77)
    /// fails with EHOSTUNREACH after ARP gives up (3 s); neither is a black hole, and CI networks differ again. A
    /// listening socket whose accept queue is full is one, on any Linux: the kernel drops further SYNs (the client
    /// retransmits until it gives up), so the host is "unreachable" in exactly the way a dead route is, on 127.0.0.1.
    ///
    /// URLSession has no connect timeout of its own, on Apple platforms or in FoundationNetworking:
    /// `timeoutIntervalForRequest` (``URLSessionTransport``'s `requestTimeout`, the CLI's `--read-timeout`) bounds the
    /// connect as it bounds every wait for bytes, and `--connect-timeout` does not reach it (docs/client.md,
    /// Transport). So URLSession gets `--read-timeout 1` here, AsyncHTTPClient `--connect-timeout 1`, and both must
    /// end at that one second.
    @Test(
        "an unreachable host is offline after the connect timeout (URLSession: its request timeout), not at once and not much later; database.db unchanged",
        arguments: TransportKind.allCases)
    func unreachableHost(_ kind: TransportKind) async throws {
        try await Self.withDevice(kind) { _, _, dir, published in
            let held = try Self.fingerprint(dir)
            let (listener, port, filler) = try Self.blackHole()
            defer {
                close(listener)
                close(filler)
            }
            let timeout = kind == .urlSession ? ["--read-timeout", "1"] : ["--connect-timeout", "1"]
            let (unreachable, time) = try await Self.fetch(kind, URL(string: "http://127.0.0.1:\(port)")!, dir, timeout)
            #expect(unreachable.status == 1, "\(unreachable.stderr)")
            #expect(
                unreachable.stderr.contains("cannot reach") && unreachable.stderr.contains("offline"),
                "\(unreachable.stderr)")
            // The timeout is what ended it: at least 1 s, and within it plus the process' own start and stop.
            #expect(time >= .milliseconds(950), "took \(time): failed before the timeout")
            #expect(time < .seconds(15), "took \(time)")
            try Self.expectUnchanged(dir, held)
            #expect(try Self.version(dir, published) == 1)
        }
    }

    @Test(
        "500 with and without Retry-After: a clear message, exit 1, database.db unchanged",
        arguments: TransportKind.allCases)
    func failingServer(_ kind: TransportKind) async throws {
        try await Self.withDevice(kind) { url, front, dir, published in
            let held = try Self.fingerprint(dir)

            // Without Retry-After: reported at once, naming the status and that database.db stays in use
            await front.set(.failing(retryAfter: nil))
            let (plain, plainTime) = try await Self.fetch(kind, url, dir)
            #expect(plain.status == 1, "\(plain.stderr)")
            #expect(
                plain.stderr.contains("HTTP 500") && plain.stderr.contains("keeps using database.db"), "\(plain.stderr)"
            )
            // At once: one request, no retry (the time bound only rules out a wait)
            let asked = await front.answers
            #expect(asked.count == 1, "\(asked)")
            #expect(plainTime < .seconds(10), "took \(plainTime)")
            try Self.expectUnchanged(dir, held)

            // With a Retry-After within the cap (10 s): the client waits 6 s and asks once more; a second wait would
            // pass the cap, so it reports the 500 it still gets, saying how long the server asked to wait
            await front.clearAnswers()
            await front.set(.failing(retryAfter: 6))
            let (retried, retriedTime) = try await Self.fetch(kind, url, dir)
            #expect(retried.status == 1, "\(retried.stderr)")
            #expect(
                retried.stderr.contains("HTTP 500") && retried.stderr.contains("retry after 6 s"), "\(retried.stderr)")
            #expect(retriedTime >= .milliseconds(5900), "took \(retriedTime): Retry-After was not honoured")
            #expect(retriedTime < .seconds(20), "took \(retriedTime)")
            let answers = await front.answers
            #expect(answers.map(\.status) == [500, 500], "\(answers)")
            try Self.expectUnchanged(dir, held)

            // With a Retry-After beyond the cap: reported at once, saying how long the server asked to wait
            await front.clearAnswers()
            await front.set(.failing(retryAfter: 3600))
            let (tooLong, tooLongTime) = try await Self.fetch(kind, url, dir)
            #expect(
                tooLong.status == 1 && tooLong.stderr.contains("500") && tooLong.stderr.contains("3600"),
                "\(tooLong.stderr)")
            let askedOnce = await front.answers
            #expect(askedOnce.count == 1, "\(askedOnce)")
            #expect(tooLongTime < .seconds(10), "took \(tooLongTime)")
            try Self.expectUnchanged(dir, held)
            #expect(try Self.version(dir, published) == 1)

            // And once the server is well again, the same device updates
            await front.set(.pass)
            let (ok, _) = try await Self.fetch(kind, url, dir)
            #expect(ok.status == 0, "\(ok.stderr)")
            #expect(try Self.version(dir, published) == 2)
        }
    }

    @Test(
        "503 with Retry-After is honoured within the cap; a longer wait is reported, not slept through",
        arguments: TransportKind.allCases)
    func busyServer(_ kind: TransportKind) async throws {
        try await Self.withDevice(kind) { url, front, dir, published in
            // A short Retry-After: the client waits and then gets version 2
            await front.set(.busy(retryAfter: 1, times: 1))
            let (ok, okTime) = try await Self.fetch(kind, url, dir)
            #expect(ok.status == 0, "\(ok.stderr)")
            #expect(okTime >= .milliseconds(900))
            #expect(try Self.version(dir, published) == 2)
        }
        try await Self.withDevice(kind) { url, front, dir, published in
            // A Retry-After beyond the cap: exit 1 at once, saying so; database.db unchanged
            let held = try Self.fingerprint(dir)
            await front.set(.busy(retryAfter: 3600, times: 5))
            let (busy, busyTime) = try await Self.fetch(kind, url, dir)
            #expect(busy.status == 1 && busy.stderr.contains("503") && busy.stderr.contains("3600"), "\(busy.stderr)")
            #expect(busyTime < .seconds(5))
            try Self.expectUnchanged(dir, held)
            #expect(try Self.version(dir, published) == 1)
        }
    }

    @Test("a captive portal's page is named as such and changes nothing", arguments: TransportKind.allCases)
    func captivePortal(_ kind: TransportKind) async throws {
        try await Self.withDevice(kind) { url, front, dir, published in
            let held = try Self.fingerprint(dir)
            await front.set(.captivePortal)
            let (portal, _) = try await Self.fetch(kind, url, dir)
            #expect(portal.status == 1 && portal.stderr.contains("captive portal"), "\(portal.stderr)")
            try Self.expectUnchanged(dir, held)
            #expect(try Self.version(dir, published) == 1)
        }
    }

    /// A proxy that strips `ETag` from every answer (manifest, 304s and snapshot): the client does not need it. The
    /// manifest's body names the checksum and the snapshot's `Repr-Digest` carries it, so the download is verified
    /// all the same; the next fetch compares the manifest's checksum with database.db's and downloads nothing.
    @Test(
        "a proxy that strips ETag still ends in a verified database, downloaded once", arguments: TransportKind.allCases
    )
    func strippedETag(_ kind: TransportKind) async throws {
        try await Self.withDevice(kind) { url, front, dir, published in
            await front.set(.stripETag)
            await front.clearAnswers()
            let (stripped, _) = try await Self.fetch(kind, url, dir)
            #expect(stripped.status == 0, "\(stripped.stderr)")
            #expect(try Self.version(dir, published) == 2)
            let first = await front.answers
            let downloads = first.filter { !$0.path.hasSuffix("/manifest") && $0.status == 200 }
            #expect(downloads.count == 1, "\(first)")
            #expect(downloads.map(\.bodyBytes).reduce(0, +) <= Int(published[1].size), "\(first)")

            // The next fetches download nothing: only the manifest is asked for, and database.db stays as it is
            let updated = try Self.fingerprint(dir)
            await front.clearAnswers()
            for _ in 0..<2 {
                let (again, _) = try await Self.fetch(kind, url, dir)
                #expect(again.status == 0, "\(again.stderr)")
            }
            // Each asks for the manifest once, with If-None-Match naming database.db's checksum, and gets a 304
            let later = await front.answers
            #expect(
                later.count == 2 && later.allSatisfy { $0.path.hasSuffix("/manifest") && $0.status == 304 }, "\(later)")
            try Self.expectUnchanged(dir, updated)
        }
    }

    static func freePort() throws -> Int {
        let (fd, port) = try silentListener()
        close(fd)
        return port
    }

    /// A TCP listener on 127.0.0.1 with a backlog of 0 whose accept queue is already full (one connection, `filler`,
    /// never accepted): the kernel drops every further SYN, so a connect to `port` hangs until the client gives up.
    static func blackHole() throws -> (listener: Int32, port: Int, filler: Int32) {
        let (fd, port) = try Self.listener(backlog: 0)
        #if canImport(Glibc)
            let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
            let filler = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(filler, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard filler >= 0, connected == 0 else {
            close(fd)
            throw FerryError(.io, "cannot fill the black hole's accept queue")
        }
        return (fd, port, filler)
    }

    /// A TCP socket on 127.0.0.1 that listens and never accepts: connections complete and then hear nothing.
    static func silentListener() throws -> (Int32, Int) { try listener(backlog: 16) }

    static func listener(backlog: Int32) throws -> (Int32, Int) {
        #if canImport(Glibc)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
            let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw FerryError(.io, "socket() failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, backlog) == 0 else {
            close(fd)
            throw FerryError(.io, "bind/listen failed")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }
}
