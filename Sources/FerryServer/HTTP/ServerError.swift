import FerryCore
import Foundation
import HTTPTypes
import Hummingbird

/// An error answered to the client as `{"error":{"code":"...","message":"..."}}` with its HTTP status, like
/// Hummingbird's `HTTPError` but in Ferry's error shape. Route groups added later throw it too.
///
/// ```swift
/// throw ServerError(.notFound, code: .notFound, "dataset 'trips' has no published snapshot")
/// ```
public struct ServerError: HTTPResponseError, CustomStringConvertible {
    public var status: HTTPResponse.Status
    /// Stable machine-readable code; FerryError codes where one fits (`not-found`, `bad-input`).
    public var code: String
    public var message: String
    /// Extra response headers (e.g. `Allow` on 405).
    public var headers: HTTPFields

    public init(_ status: HTTPResponse.Status, code: FerryError.Code, _ message: String, headers: HTTPFields = [:]) {
        self.init(status, code: code.rawValue, message, headers: headers)
    }

    public init(_ status: HTTPResponse.Status, code: String, _ message: String, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
    }

    public var description: String { "\(status.code) \(code): \(message)" }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        makeResponse()
    }

    /// The JSON response (with `Cache-Control: no-store`).
    public func makeResponse() -> Response {
        var headers = self.headers
        headers[.contentType] = "application/json"
        headers[.cacheControl] = "no-store"
        return Response(
            status: status, headers: headers, body: .init(byteBuffer: Self.body(code: code, message: message)))
    }

    static func body(code: String, message: String) -> ByteBuffer {
        struct Wire: Encodable {
            struct Inner: Encodable {
                let code: String
                let message: String
            }
            let error: Inner
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding two strings cannot fail.
        let data = (try? encoder.encode(Wire(error: .init(code: code, message: message)))) ?? Data()
        return ByteBuffer(bytes: data)
    }
}
