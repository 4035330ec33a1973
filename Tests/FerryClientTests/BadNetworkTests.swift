import FerryCore
import FerryServer
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
/// with a clear message and exit code, in bounded time, and none changes database.db.
@Suite struct BadNetworkTests {
    /// The real Ferry routes behind a front that misbehaves as told: busy with `Retry-After`, a captive portal's
    /// page, or a proxy that strips `ETag`.
    struct Front<Inner: HTTPResponder>: HTTPResponder where Inner.Context == BasicRequestContext {
        enum Mode: Sendable { case pass, busy(retryAfter: Int, times: Int), captivePortal, stripETag }
        actor State {
            var mode: Mode = .pass
            var busyAnswers = 0
            func set(_ mode: Mode) { self.mode = mode }
            func next() -> Mode {
                if case .busy(let seconds, let times) = mode {
                    if times <= 1 { mode = .pass }
                    else { mode = .busy(retryAfter: seconds, times: times - 1) }
                    busyAnswers += 1
                    return .busy(retryAfter: seconds, times: times)
                }
                return mode
            }
        }
        let inner: Inner
        let state = State()

        func respond(to request: Request, context: BasicRequestContext) async throws -> Response {
            switch await state.next() {
            case .busy(let seconds, _):
                var headers = HTTPFields()
                headers[.retryAfter] = String(seconds)
                headers[.contentType] = "application/json"
                return Response(status: .serviceUnavailable, headers: headers, body: .init(byteBuffer: ByteBuffer(string: #"{"error":{"code":"unavailable","message":"busy"}}"#)))
            case .captivePortal:
                var headers = HTTPFields()
                headers[.contentType] = "text/html"
                return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: "<!doctype html><html><body>Sign in to Airport Wi-Fi</body></html>")))
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
        _ body: @Sendable (_ url: URL, _ front: Front<RouterResponder<BasicRequestContext>>.State, _ dir: String, _ published: [Manifest]) async throws -> Void
    ) async throws {
        let temp = try TemporaryDirectory("bad-network")
        defer { temp.remove() }
        let fixtures = SnapshotFixtures(root: temp.appending("store"))
        let v1 = try fixtures.publish(rows: 4)
        let configuration = ServerConfiguration(storePath: fixtures.store.root, port: 0)
        let catalog = SnapshotCatalog(store: fixtures.store, pollInterval: .seconds(1), logger: .test)
        let router = try buildRouter(configuration, catalog: catalog, logger: .test)
        let front = Front(inner: router.buildResponder())
        let app = Application(responder: front, configuration: .init(address: .hostname("127.0.0.1", port: 0)), logger: .test)
        try await app.test(.live) { client in
            let url = URL(string: "http://127.0.0.1:\(client.port!)")!
            let dir = temp.appending("device").path
            try await catalog.refresh()
            let first = try await runFerryOffPool(["fetch", "--server", url.absoluteString, "--dataset", "trips", "--dir", dir])
            #expect(first.status == 0, "\(first.stderr)")
            let v2 = try fixtures.publish(rows: 6)
            try await catalog.refresh()
            try await body(url, front.state, dir, [v1, v2])
        }
    }

    static func fetch(_ url: URL, _ dir: String, _ extra: [String] = []) async throws -> (ProcessResult, Duration) {
        let start = ContinuousClock.now
        let result = try await runFerryOffPool(["fetch", "--server", url.absoluteString, "--dataset", "trips", "--dir", dir, "--apply"] + extra)
        return (result, ContinuousClock.now - start)
    }

    static func version(_ dir: String, _ published: [Manifest]) throws -> Int? {
        try publishedVersion(of: URL(fileURLWithPath: dir).appendingPathComponent("database.db"), among: published)
    }

    @Test("a refused connection is offline at once; a server that never answers times out as configured")
    func refusedAndSilent() async throws {
        let temp = try TemporaryDirectory("bad-network-closed")
        defer { temp.remove() }
        // A port nothing listens on
        let closed = try Self.freePort()
        let (refused, refusedTime) = try await Self.fetch(URL(string: "http://127.0.0.1:\(closed)")!, temp.appending("a").path)
        #expect(refused.status == 1 && refused.stderr.contains("offline"), "\(refused.stderr)")
        #expect(refusedTime < .seconds(2), "took \(refusedTime)")

        // A listener that accepts (the kernel completes the handshake) and never answers
        let (socket, port) = try Self.silentListener()
        defer { close(socket) }
        let (silent, silentTime) = try await Self.fetch(URL(string: "http://127.0.0.1:\(port)")!, temp.appending("b").path, ["--read-timeout", "1"])
        #expect(silent.status == 1, "\(silent.stderr)")
        #expect(silent.stderr.contains("offline") || silent.stderr.contains("timed out") || silent.stderr.contains("timeout"), "\(silent.stderr)")
        #expect(silentTime < .seconds(6), "took \(silentTime)")
    }

    @Test("503 with Retry-After is honoured within the cap; a longer wait is reported, not slept through")
    func busyServer() async throws {
        try await Self.withDevice { url, front, dir, published in
            // A short Retry-After: the client waits and then gets version 2
            await front.set(.busy(retryAfter: 1, times: 1))
            let (ok, okTime) = try await Self.fetch(url, dir)
            #expect(ok.status == 0, "\(ok.stderr)")
            #expect(okTime >= .milliseconds(900))
            #expect(try Self.version(dir, published) == 2)
        }
        try await Self.withDevice { url, front, dir, published in
            // A Retry-After beyond the cap: exit 1 at once, saying so; database.db unchanged
            await front.set(.busy(retryAfter: 3600, times: 5))
            let (busy, busyTime) = try await Self.fetch(url, dir)
            #expect(busy.status == 1 && busy.stderr.contains("503") && busy.stderr.contains("3600"), "\(busy.stderr)")
            #expect(busyTime < .seconds(5))
            #expect(try Self.version(dir, published) == 1)
        }
    }

    @Test("a captive portal's page is named as such and changes nothing; a proxy that strips ETag still ends in a verified database")
    func portalAndStrippedETag() async throws {
        try await Self.withDevice { url, front, dir, published in
            await front.set(.captivePortal)
            let (portal, _) = try await Self.fetch(url, dir)
            #expect(portal.status == 1 && portal.stderr.contains("captive portal"), "\(portal.stderr)")
            #expect(try Self.version(dir, published) == 1)

            await front.set(.stripETag)
            let (stripped, _) = try await Self.fetch(url, dir)
            // Either the download is verified another way, or it is refused clearly; never a wrong database.
            if stripped.status == 0 {
                #expect(try Self.version(dir, published) == 2)
            } else {
                #expect(stripped.status == 1 && !stripped.stderr.isEmpty)
                #expect(try Self.version(dir, published) == 1)
            }
        }
    }

    static func freePort() throws -> Int {
        let (fd, port) = try silentListener()
        close(fd)
        return port
    }

    /// A TCP socket on 127.0.0.1 that listens and never accepts: connections complete and then hear nothing.
    static func silentListener() throws -> (Int32, Int) {
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
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 16) == 0 else { close(fd); throw FerryError(.io, "bind/listen failed") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }
}
