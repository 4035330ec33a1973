import HummingbirdCore
import NIOCore

extension ServerConfiguration {
    /// The HTTP/1.1 channel: the request head limit, and Ferry's channel handlers after the codec, among them the
    /// header and idle timeouts (``ConnectionTimeoutHandler``; Hummingbird's own idle timeout stays off, as it would
    /// not see the requests ``RawNotModifiedHandler`` answers).
    var http1Channel: HTTP1Channel.Configuration {
        let headerTimeout = self.headerTimeout.map { TimeAmount($0) }
        let idleTimeout = self.idleTimeout.map { TimeAmount($0) }
        let timed = headerTimeout != nil || idleTimeout != nil
        // An autoclosure: every connection gets its own handlers.
        return HTTP1Channel.Configuration(
            additionalChannelHandlers: [FlushBeforeCloseHandler(), LoopbackPeerHandler(), CloseAfterResponseHandler()]
                + (timed ? [ConnectionTimeoutHandler(headerTimeout: headerTimeout, idleTimeout: idleTimeout)] : []),
            idleTimeout: nil,
            httpDecoderConfiguration: .init(maxHeaderFieldSize: maxHeaderBytes, maxHeaderListSize: maxHeaderBytes))
    }
}
