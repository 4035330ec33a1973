import NIOCore

/// Holds back a full `close` until every write issued before it has reached the socket.
///
/// Hummingbird 2.28.1's `HTTPConnectionStateHandler` calls `close` right after writing a response's end when the
/// connection must close (`Connection: close`, or graceful shutdown after the request in flight). NIO's close
/// fails writes still queued in the channel, so the last chunk(s) of a large streamed body were lost: a download
/// drained on SIGTERM ended short (`curl: (18) transfer closed with outstanding read data`). Sitting between
/// the HTTP codec and that handler, this handler delays the close until the queued writes completed (or failed,
/// e.g. because the peer went away), so a drained download finishes with every byte.
final class FlushBeforeCloseHandler: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = Any
    typealias OutboundOut = Any

    private var pendingWrites = 0
    private var deferredClose: (mode: CloseMode, promise: EventLoopPromise<Void>?)?

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        pendingWrites += 1
        let promise = promise ?? context.eventLoop.makePromise()
        let loopBoundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        promise.futureResult.assumeIsolated().whenComplete { _ in
            self.pendingWrites -= 1
            if self.pendingWrites == 0, let close = self.deferredClose {
                self.deferredClose = nil
                loopBoundContext.value.close(mode: close.mode, promise: close.promise)
            }
        }
        context.write(data, promise: promise)
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        guard mode == .all, pendingWrites > 0 else {
            context.close(mode: mode, promise: promise)
            return
        }
        if let existing = deferredClose {
            if let promise {
                if let earlier = existing.promise {
                    earlier.futureResult.cascade(to: promise)
                } else {
                    deferredClose = (mode, promise)
                }
            }
        } else {
            deferredClose = (mode, promise)
        }
        context.flush()
    }
}
