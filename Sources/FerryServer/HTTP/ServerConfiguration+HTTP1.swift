import HummingbirdCore
import NIOCore

extension ServerConfiguration {
    /// The HTTP/1.1 channel: timeouts, the request head limit, and Ferry's channel handlers after the codec.
    var http1Channel: HTTP1Channel.Configuration {
        let headerTimeout = self.headerTimeout.map { TimeAmount($0) }
        return HTTP1Channel.Configuration(
            additionalChannelHandlers: [FlushBeforeCloseHandler(), LoopbackPeerHandler(), CloseAfterResponseHandler()]
                + (headerTimeout.map { [RequestHeadTimeoutHandler(timeout: $0)] } ?? []),
            idleTimeout: idleTimeout.map { TimeAmount($0) },
            httpDecoderConfiguration: .init(maxHeaderFieldSize: maxHeaderBytes, maxHeaderListSize: maxHeaderBytes))
    }
}
