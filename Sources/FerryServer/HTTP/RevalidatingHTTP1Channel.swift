import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// Hummingbird's HTTP/1.1 child channel with one handler more, ``RawNotModifiedHandler``, which writes the route's
/// answer (``ReadAnswer``) to a revalidation or a whole-file GET before the HTTP codec, on a connection whose bytes
/// the decoder has not seen yet.
///
/// The pipeline is the one `HTTP1Channel` (Hummingbird 2.28.1) builds: NIO's HTTP/1 codec (with
/// ``RawNotModifiedHandler`` before it), `HTTP1ToHTTPServerCodec`, the configuration's `additionalChannelHandlers`,
/// then `HTTPConnectionStateHandler` (`HTTP1Channel` has no place before the codec, which is why this type exists).
/// The header and idle timeouts are ``ConnectionTimeoutHandler``'s, which the raw handler keeps informed.
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
    /// Whether ``RawNotModifiedHandler`` sends whole files itself with `sendfile`: only on plain HTTP (TLS
    /// encrypts in this process, so the route's chunks are the way there).
    var sendsFiles = false

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
            let raw = revalidator.map {
                RawNotModifiedHandler(
                    revalidator: $0, maxHeadBytes: configuration.httpDecoder.maxHeaderListSize, sendsFiles: sendsFiles)
            }
            if let raw {
                try pipeline.addHandler(raw, position: .before(try pipeline.handler(type: HTTPResponseEncoder.self)))
            }
            try pipeline.addHandler(HTTP1ToHTTPServerCodec(secure: false))
            try pipeline.addHandlers(configuration.additionalChannelHandlers())
            try pipeline.addHandler(
                HTTPConnectionStateHandler(idleTimeout: configuration.idleTimeout.map { .init($0) }, logger: logger))
            if let raw {
                // Nil when the server has neither timeout (then nothing is timed).
                raw.timeouts = try? pipeline.handler(type: ConnectionTimeoutHandler.self)
            }
            return try NIOAsyncChannel(
                wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
        }
    }

    func handle(value asyncChannel: Value, logger: Logger) async {
        await handleHTTP(asyncChannel: asyncChannel, logger: logger)
    }
}
