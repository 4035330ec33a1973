import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// Hummingbird's HTTP/1.1 child channel with one handler more: ``NotModifiedHandler``, right before the request
/// reaches Hummingbird's async responder, answers conditional requests it can answer exactly as the route would.
///
/// The pipeline is the one `HTTP1Channel` (Hummingbird 2.28.1) builds: NIO's HTTP/1 codec, `HTTP1ToHTTPServerCodec`,
/// the configuration's `additionalChannelHandlers`, `HTTPConnectionStateHandler`, then ``NotModifiedHandler``
/// (`HTTP1Channel` has no place after the state handler, which is why this type exists). Behind the state handler,
/// a 304 answered in the channel counts for the idle timeout and for graceful shutdown like any other response, and
/// every Ferry handler (header timeout, close after response, flush before close) sees it too.
///
/// ```swift
/// let server = HTTPServerBuilder { responder in
///     RevalidatingHTTP1Channel(responder: responder, configuration: configuration.http1Channel, revalidator: revalidator)
/// }
/// ```
struct RevalidatingHTTP1Channel: ServerChildChannel, HTTPChannelHandler {
    typealias Value = NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>

    let responder: HTTPChannelHandler.Responder
    let configuration: HTTP1Channel.Configuration
    /// Nil leaves every request to the router (tests compare both ways).
    let revalidator: ChannelRevalidator?

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            var limits = NIOHTTPDecoderLimitConfiguration()
            limits.maxHeaderFieldSize = configuration.httpDecoder.maxHeaderFieldSize
            limits.maxHeaderListSize = configuration.httpDecoder.maxHeaderListSize
            limits.maxHeaderFieldCount = configuration.httpDecoder.maxHeaderFieldCount
            let pipeline = channel.pipeline.syncOperations
            try pipeline.configureHTTPServerPipeline(
                withPipeliningAssistance: false,  // as HTTP1Channel: NIOAsyncChannel handles pipelined requests
                withErrorHandling: false,  // Hummingbird answers parse errors itself
                withOutboundHeaderValidation: false,  // swift-http-types validates
                withEncoderConfiguration: .init(),
                withDecoderLimitConfiguration: limits
            )
            try pipeline.addHandler(HTTP1ToHTTPServerCodec(secure: false))
            try pipeline.addHandlers(configuration.additionalChannelHandlers())
            try pipeline.addHandler(HTTPConnectionStateHandler(idleTimeout: configuration.idleTimeout.map { .init($0) }, logger: logger))
            if let revalidator {
                try pipeline.addHandler(NotModifiedHandler(revalidator: revalidator))
            }
            return try NIOAsyncChannel(wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
        }
    }

    func handle(value asyncChannel: Value, logger: Logger) async {
        await handleHTTP(asyncChannel: asyncChannel, logger: logger)
    }
}
