import HTTPTypes
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import Testing

@testable import FerryServer

/// The header and idle timeouts on the event loop's virtual clock (EmbeddedChannel): what closes a connection and
/// what keeps it open, the requests answered before the HTTP decoder included.
@Suite struct ConnectionTimeoutTests {
    /// Stands in for the HTTP decoder: "h" is a request head, "e" its end, anything else bytes of a head in progress.
    final class Decoder: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias InboundOut = HTTPRequestPart

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch String(buffer: unwrapInboundIn(data)) {
            case "h":
                context.fireChannelRead(
                    wrapInboundOut(.head(HTTPRequest(method: .get, scheme: nil, authority: nil, path: "/"))))
            case "e": context.fireChannelRead(wrapInboundOut(.end(nil)))
            default: break
            }
        }
    }

    /// A connected channel with the handler (header timeout 10 s, idle timeout 60 s).
    static func connection() throws -> (EmbeddedChannel, ConnectionTimeoutHandler) {
        let channel = EmbeddedChannel()
        let handler = ConnectionTimeoutHandler(headerTimeout: .seconds(10), idleTimeout: .seconds(60))
        try channel.pipeline.syncOperations.addHandler(Decoder())
        try channel.pipeline.syncOperations.addHandler(handler)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return (channel, handler)
    }

    static func send(_ channel: EmbeddedChannel, _ text: String) throws {
        try channel.writeInbound(ByteBuffer(string: text))
    }

    static func advance(_ channel: EmbeddedChannel, seconds: Int64) {
        channel.embeddedEventLoop.advanceTime(by: .seconds(seconds))
    }

    /// One whole request, its head complete a second after its first byte, answered at once.
    static func request(_ channel: EmbeddedChannel) throws {
        try send(channel, "GET / HT")
        advance(channel, seconds: 1)
        try send(channel, "h")
        try send(channel, "e")
        try channel.writeOutbound(HTTPResponsePart.head(HTTPResponse(status: .ok)))
        try channel.writeOutbound(HTTPResponsePart.end(nil))
    }

    @Test func aHeadNotCompleteWithinTheHeaderTimeoutClosesTheConnection() throws {
        let (channel, _) = try Self.connection()
        try Self.send(channel, "GET / HTTP/1.1\r\nHo")
        Self.advance(channel, seconds: 9)
        #expect(channel.isActive)
        Self.advance(channel, seconds: 1)
        #expect(!channel.isActive)
    }

    @Test func aBusyConnectionOutlivesBothTimeouts() throws {
        let (channel, _) = try Self.connection()
        for _ in 0..<100 {
            try Self.request(channel)
            Self.advance(channel, seconds: 1)
        }
        #expect(channel.isActive)  // 200 s of requests
        _ = try channel.finish()
    }

    @Test func anIdleConnectionClosesAfterTheIdleTimeout() throws {
        let (channel, _) = try Self.connection()
        try Self.request(channel)
        Self.advance(channel, seconds: 59)
        #expect(channel.isActive)
        Self.advance(channel, seconds: 1)
        #expect(!channel.isActive)
        // A connection that never sent a byte is idle too.
        let (silent, _) = try Self.connection()
        Self.advance(silent, seconds: 60)
        #expect(!silent.isActive)
    }

    @Test func aResponseBeingWrittenIsNeverIdleAndASlowBodyIs() throws {
        // Given a download: the request read, its response still being written
        let (channel, _) = try Self.connection()
        try Self.send(channel, "h")
        try Self.send(channel, "e")
        try channel.writeOutbound(HTTPResponsePart.head(HTTPResponse(status: .ok)))
        Self.advance(channel, seconds: 600)
        #expect(channel.isActive)
        // When it ends, the idle clock starts
        try channel.writeOutbound(HTTPResponsePart.end(nil))
        Self.advance(channel, seconds: 60)
        #expect(!channel.isActive)

        // A request whose body stops arriving is idle
        let (upload, _) = try Self.connection()
        try Self.send(upload, "h")
        Self.advance(upload, seconds: 60)
        #expect(!upload.isActive)
    }

    @Test func requestsAnsweredBeforeTheDecoderKeepTheConnectionOpen() throws {
        // Given a connection whose every request is answered by RawNotModifiedHandler (the decoder sees no part)
        let (channel, handler) = try Self.connection()
        for _ in 0..<100 {
            try Self.send(channel, "GET /v1/datasets/trips/manifest HTTP/1.1\r\nIf-None-Match: *\r\n\r\n")
            handler.headAnswered()
            Self.advance(channel, seconds: 2)
        }
        // Then neither the header clock (started by each request's bytes) nor the idle clock closed it
        #expect(channel.isActive)
        Self.advance(channel, seconds: 60)
        #expect(!channel.isActive)
    }
}
