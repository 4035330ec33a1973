import NIOCore
import NIOHTTPTypes

/// The connection's two clocks: the header timeout (a request head, request line and headers, must be complete
/// within `headerTimeout` of its first byte, so a slowloris client sending one header byte a second holds a
/// connection for at most that long) and the idle timeout (a connection with no request in flight and nothing
/// read or answered for `idleTimeout` is closed).
///
/// The idle timeout was Hummingbird's (`HTTPConnectionStateHandler`) and keeps its rules: a request whose head has
/// been read and whose response is being written is never idle (a long download), one whose body is still being
/// read is. It lives here because ``RawNotModifiedHandler`` answers requests before the HTTP decoder, where
/// Hummingbird's handler never sees them; it reports each to ``headAnswered()``.
///
/// Hummingbird's idle timeout cannot tell a slow head from an idle keep-alive connection, so this handler watches
/// both levels. Its companion ``ByteWatcher`` sits first in the pipeline (before TLS and the HTTP decoder) and
/// starts the header clock when bytes arrive while no request is in flight; this handler, after the HTTP codec
/// (`HTTP1Channel.Configuration.additionalChannelHandlers`), stops it when the decoder delivers the head, and
/// counts requests until their responses end. A slow request body is left to the idle timeout.
///
/// Both timers are lazy: a request only moves a deadline, and a timer, when it fires, closes the connection or
/// waits for the current deadline. Scheduling and cancelling timers for every request of a busy keep-alive
/// connection was measured as a visible part of a 304.
final class ConnectionTimeoutHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    let headerTimeout: TimeAmount?
    let idleTimeout: TimeAmount?
    private var requestsInFlight = 0
    /// A head has been read and its request's end has not.
    private var readingRequest = false
    /// When the head being received must be complete; nil while no head is being received.
    private var headDeadline: NIODeadline?
    private var headTimer: Scheduled<Void>?
    /// When the connection last read a request part or answered a request (the event loop's clock, so tests can
    /// move it).
    private var lastActivity = NIODeadline.uptimeNanoseconds(0)
    private var idleTimer: Scheduled<Void>?
    private var context: ChannelHandlerContext?

    init(headerTimeout: TimeAmount?, idleTimeout: TimeAmount?) {
        self.headerTimeout = headerTimeout
        self.idleTimeout = idleTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if headerTimeout != nil {
            // Fails only when the channel is already closing, and then there is no head left to time.
            try? context.pipeline.syncOperations.addHandler(ByteWatcher(owner: self), position: .first)
        }
        if context.channel.isActive { becameActive() }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        headTimer?.cancel()
        headTimer = nil
        idleTimer?.cancel()
        idleTimer = nil
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        becameActive()
        context.fireChannelActive()
    }

    private var now: NIODeadline { context?.eventLoop.now ?? .now() }

    private func becameActive() {
        lastActivity = now
        armIdleTimer()
    }

    /// Bytes arrived: the start of a request head when no request is in flight.
    func bytesArrived() {
        guard let headerTimeout, requestsInFlight == 0, headDeadline == nil else { return }
        let deadline = now + headerTimeout
        headDeadline = deadline
        if headTimer == nil { scheduleHeadTimer(at: deadline) }
    }

    /// A request was answered before the HTTP decoder saw it (``RawNotModifiedHandler``): its head came in time and
    /// the connection was active.
    func headAnswered() {
        headDeadline = nil
        lastActivity = now
        armIdleTimer()
    }

    /// A request answered before the HTTP decoder saw it started a response that takes a while (a file sent by
    /// ``RawNotModifiedHandler``): like a route's download, the connection is not idle until ``rawResponseEnded()``.
    func rawResponseStarted() {
        headDeadline = nil
        requestsInFlight += 1
        lastActivity = now
    }

    /// The response of ``rawResponseStarted()`` has been written (or the connection failed).
    func rawResponseEnded() {
        requestsInFlight = max(0, requestsInFlight - 1)
        lastActivity = now
        armIdleTimer()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            requestsInFlight += 1
            readingRequest = true
            headDeadline = nil
        case .body:
            break
        case .end:
            readingRequest = false
        }
        lastActivity = now
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) {
            requestsInFlight = max(0, requestsInFlight - 1)
            lastActivity = now
            armIdleTimer()
        }
        context.write(data, promise: promise)
    }

    private func scheduleHeadTimer(at deadline: NIODeadline) {
        guard let context else { return }
        headTimer = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) {
            self.headTimer = nil
            guard let current = self.headDeadline else { return }  // the head arrived in time
            if current <= self.now {
                self.context?.close(promise: nil)
            } else {
                self.scheduleHeadTimer(at: current)  // a later head started since
            }
        }
    }

    /// A request whose response is being written is not idle (Hummingbird's rule: a download is never cut).
    private var responding: Bool { requestsInFlight > 0 && !readingRequest }

    private func armIdleTimer() {
        guard let idleTimeout, idleTimer == nil, !responding, let context else { return }
        idleTimer = context.eventLoop.assumeIsolated().scheduleTask(deadline: lastActivity + idleTimeout) {
            self.idleTimer = nil
            guard !self.responding else { return }  // armed again when the response ends
            if self.lastActivity + idleTimeout <= self.now {
                self.context?.close(promise: nil)
            } else {
                self.armIdleTimer()
            }
        }
    }

    /// Passes every inbound byte on untouched and tells its owner that some arrived.
    final class ByteWatcher: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = ByteBuffer
        typealias InboundOut = ByteBuffer

        private let owner: ConnectionTimeoutHandler

        init(owner: ConnectionTimeoutHandler) {
            self.owner = owner
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            owner.bytesArrived()
            context.fireChannelRead(data)
        }
    }
}
