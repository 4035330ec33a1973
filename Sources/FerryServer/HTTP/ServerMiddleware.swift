import CoreMetrics
import FerryCore
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// Outermost middleware: turns every error into Ferry's JSON error shape (405 with `Allow` for a known path with
/// another method), counts requests by route and status and body bytes, and logs one debug line per request.
struct ServerMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics
    let routes: Locked<RouteTable>
    /// The status page's last hour of traffic (requests to the status page itself are left out).
    let traffic: TrafficRecorder
    /// Where an error answered to a device is noted for the fleet (``DeviceSightings/noteError(headers:path:status:now:)``).
    var devices: DeviceSightings? = nil
    /// Whether a dataset named in a path is one the server serves: only those get fleet notes, so made-up names
    /// add no rows.
    var servesDataset: @Sendable (String) -> Bool = { _ in false }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as ServerError {
            response = error.makeResponse()
        } catch let error as HTTPError where error.status == .notFound {
            let allowed = routes.withLock { $0.allowedMethods(path: request.uri.path) }
            if allowed.isEmpty {
                response = ServerError(.notFound, code: .notFound, "no such endpoint: \(request.uri.path)")
                    .makeResponse()
            } else {
                let allow = allowed.map(\.rawValue).joined(separator: ", ")
                response = ServerError(
                    .methodNotAllowed, code: "method-not-allowed",
                    "\(request.method.rawValue) is not allowed on \(request.uri.path); use \(allow)",
                    headers: [.allow: allow]
                ).makeResponse()
            }
        } catch let error as any HTTPResponseError {
            response = ServerError(error.status, code: "http-\(error.status.code)", error.status.reasonPhrase)
                .makeResponse()
        } catch {
            context.logger.error(
                "request failed", metadata: ["path": .string(request.uri.path), "error": .string("\(error)")])
            response = ServerError(.internalServerError, code: "internal", "the server failed to answer; see its log")
                .makeResponse()
        }
        devices?.noteError(
            headers: request.headers, path: request.uri.path, status: response.status, serves: servesDataset)
        let route = context.endpointPath ?? "NotFound"
        metrics.recordRequest(route: route, status: response.status.code)
        let traffic = route.hasPrefix("/status") ? nil : self.traffic
        traffic?.recordRequest(status: response.status.code)
        if request.method != .head, let length = response.body.contentLength, length > 0 {
            let counter = metrics.bytesCounter(route: route)
            if response.headers[.contentType] == "application/vnd.sqlite3" {
                // Streamed: count what is actually written, chunk by chunk.
                let body = response.body
                response.body = ResponseBody(contentLength: length) { writer in
                    try await body.write(
                        writer.map { buffer in
                            counter.increment(by: buffer.readableBytes)
                            traffic?.recordBytes(buffer.readableBytes)
                            return buffer
                        })
                }
            } else {
                counter.increment(by: length)
                traffic?.recordBytes(length)
            }
        }
        if context.logger.logLevel <= .debug {
            context.logger.debug(
                "\(request.method.rawValue) \(request.uri) \(response.status.code)",
                metadata: ["route": .string(route), "bytes": .stringConvertible(response.body.contentLength ?? 0)])
        }
        return response
    }
}
