import NIOCore
import NIOHTTPTypes

/// Closes a connection whose request head (request line and headers) is not complete within `timeout` of its
/// first byte: a slowloris client sending one header byte a second holds a connection for at most that long.
///
/// Hummingbird's idle timeout cannot tell a slow head from an idle keep-alive connection, so this handler watches
/// both levels. Its companion ``ByteWatcher`` sits first in the pipeline (before TLS and the HTTP decoder) and
/// starts the clock when bytes arrive while no request is in flight; this handler, after the HTTP codec
/// (`HTTP1Channel.Configuration.additionalChannelHandlers`), stops it when the decoder delivers the head, and
/// counts requests until their responses end. An idle connection (no byte since the last response) is left to
/// the idle timeout. A slow request body is not timed here.
final class RequestHeadTimeoutHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    let timeout: TimeAmount
    private var requestsInFlight = 0
    private var timer: Scheduled<Void>?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // Fails only when the channel is already closing, and then there is no head left to time.
        try? context.pipeline.syncOperations.addHandler(ByteWatcher(owner: self, context: context), position: .first)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
    }

    /// Bytes arrived: the start of a request head when no request is in flight.
    func bytesArrived(context: ChannelHandlerContext) {
        guard requestsInFlight == 0, timer == nil else { return }
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) {
            self.timer = nil
            loopBound.value.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = unwrapInboundIn(data) {
            requestsInFlight += 1
            timer?.cancel()
            timer = nil
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) {
            requestsInFlight = max(0, requestsInFlight - 1)
        }
        context.write(data, promise: promise)
    }

    /// Passes every inbound byte on untouched and tells its owner that some arrived.
    final class ByteWatcher: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = ByteBuffer
        typealias InboundOut = ByteBuffer

        private let owner: RequestHeadTimeoutHandler
        private let ownerContext: ChannelHandlerContext

        init(owner: RequestHeadTimeoutHandler, context: ChannelHandlerContext) {
            self.owner = owner
            self.ownerContext = context
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            owner.bytesArrived(context: ownerContext)
            context.fireChannelRead(data)
        }
    }
}
