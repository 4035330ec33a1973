import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// Closes the connection after a response that says `Connection: close` (RFC 9112 §9.6), the way servers close
/// after refusing a request body they will not read (413 on `POST /changes`).
///
/// Hummingbird 2.28.1 only closes when the *request* asked for it; after any other response it reads and
/// discards the rest of the request body, however long the client keeps sending. This handler half-closes the
/// output once the response is written (the client sees its answer, then end of stream) and closes the
/// connection for good after `linger` at the latest. The linger keeps reading in that window, so a client still
/// sending is not answered with a TCP reset that could destroy the response before the client read it.
///
/// Sits in the channel pipeline after the HTTP codec (`HTTP1Channel.Configuration.additionalChannelHandlers`).
final class CloseAfterResponseHandler: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    let linger: TimeAmount
    private var closeAfterEnd = false
    private var lingerTimer: Scheduled<Void>?

    init(linger: TimeAmount = .seconds(2)) {
        self.linger = linger
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(let response):
            closeAfterEnd = response.headerFields[.connection]?.lowercased().contains("close") == true
            context.write(data, promise: promise)
        case .body:
            context.write(data, promise: promise)
        case .end:
            guard closeAfterEnd else {
                context.write(data, promise: promise)
                return
            }
            closeAfterEnd = false
            let written = promise ?? context.eventLoop.makePromise()
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            written.futureResult.assumeIsolated().whenComplete { _ in
                let context = loopBound.value
                context.close(mode: .output, promise: nil)
                self.lingerTimer = context.eventLoop.assumeIsolated().scheduleTask(in: self.linger) {
                    loopBound.value.close(promise: nil)
                }
            }
            context.writeAndFlush(data, promise: written)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        lingerTimer?.cancel()
        lingerTimer = nil
    }
}
