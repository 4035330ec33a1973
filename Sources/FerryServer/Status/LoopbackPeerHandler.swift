import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTPTypes

/// Marks each request that arrived from a loopback address (127.0.0.0/8, ::1) with an internal header, so a route
/// can tell a browser on this machine from a remote client: Hummingbird's `BasicRequestContext` does not keep the
/// peer address. Any value a client sent in that header is removed first, so it cannot be forged.
///
/// Only a request with a query is marked (the mark is for `/status?token=`), and the peer is looked up once per
/// connection: a request without the header and without a query passes unchanged, at no cost.
///
/// Sits in the channel pipeline after the HTTP codec (`HTTP1Channel.Configuration.additionalChannelHandlers`).
final class LoopbackPeerHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    /// `Ferry-Internal-Peer: loopback`, set only by this handler.
    static let header = HTTPField.Name("Ferry-Internal-Peer")!

    /// Whether the peer is on this machine, once known.
    private var loopbackPeer: Bool?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(var request) = unwrapInboundIn(data) else {
            context.fireChannelRead(data)
            return
        }
        let forged = request.headerFields[Self.header] != nil
        let hasQuery = request.path?.utf8.contains(UInt8(ascii: "?")) ?? false
        guard forged || hasQuery else {
            context.fireChannelRead(data)
            return
        }
        request.headerFields[Self.header] = nil
        if hasQuery, isLoopback(context) {
            request.headerFields[Self.header] = "loopback"
        }
        context.fireChannelRead(wrapInboundOut(.head(request)))
    }

    private func isLoopback(_ context: ChannelHandlerContext) -> Bool {
        if let loopbackPeer { return loopbackPeer }
        let found = Self.isLoopback(context.channel.remoteAddress)
        loopbackPeer = found
        return found
    }

    static func isLoopback(_ address: SocketAddress?) -> Bool {
        guard let address, let ip = address.ipAddress else { return false }  // a Unix socket has no IP
        switch address.protocol {
        case .inet: return ip.hasPrefix("127.")
        case .inet6: return ip == "::1" || ip.hasPrefix("::ffff:127.")
        default: return false
        }
    }

    /// Whether `request` came from a loopback address (only true behind this handler).
    static func isLoopback(_ request: Request) -> Bool {
        request.headers[header] == "loopback"
    }
}
