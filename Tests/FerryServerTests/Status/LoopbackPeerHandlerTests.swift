import HTTPTypes
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import Testing

@testable import FerryServer

@Suite("Status: ?token= is accepted from loopback peers only, and the marker header cannot be forged")
struct LoopbackPeerHandlerTests {
    /// The request head as the router would see it after the handler, from a peer at `address`.
    func head(from address: SocketAddress, forged: Bool) throws -> HTTPRequest {
        let channel = EmbeddedChannel(handler: LoopbackPeerHandler())
        channel.remoteAddress = address
        var request = HTTPRequest(method: .get, scheme: "http", authority: "x", path: "/status?token=t")
        if forged { request.headerFields[LoopbackPeerHandler.header] = "loopback" }
        try channel.writeInbound(HTTPRequestPart.head(request))
        guard case .head(let seen)? = try channel.readInbound(as: HTTPRequestPart.self) else {
            throw CancellationError()
        }
        _ = try channel.finish()
        return seen
    }

    @Test func marksLoopbackPeersAndStripsForgedMarks() throws {
        for address in ["127.0.0.1", "127.1.2.3", "::1"] {
            let seen = try head(from: try SocketAddress(ipAddress: address, port: 5000), forged: false)
            #expect(seen.headerFields[LoopbackPeerHandler.header] == "loopback", "\(address)")
        }
        for address in ["10.0.0.7", "192.168.1.2", "2001:db8::1", "::ffff:10.0.0.1"] {
            let seen = try head(from: try SocketAddress(ipAddress: address, port: 5000), forged: true)
            #expect(seen.headerFields[LoopbackPeerHandler.header] == nil, "\(address)")
        }
    }
}
