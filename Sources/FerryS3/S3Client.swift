import AsyncHTTPClient
import Crypto
import FerryCore
import Foundation
import NIOCore
import NIOHTTP1

/// An object read with ``S3Client/get(bucket:key:range:ifNoneMatch:)``.
public struct S3Object: Sendable {
    public var body: Data
    public var etag: String?
    /// `Content-Range` of a ranged read (`bytes 0-9/1234`).
    public var contentRange: String?
}

/// The answer to a GET: the object, or `notModified` when `If-None-Match` matched.
public enum S3GetResult: Sendable {
    case object(S3Object)
    case notModified
}

/// What a HEAD says about an object.
public struct S3ObjectInfo: Sendable, Equatable {
    public var size: Int
    public var etag: String?
    /// The object's SHA-256 as S3 stored it (base64), when it was uploaded with one and asked for.
    public var checksumSHA256: String?
}

/// A listed object.
public struct S3ListedObject: Sendable, Equatable {
    public var key: String
    public var size: Int
    public var etag: String
}

/// One page of ListObjectsV2.
public struct S3ListPage: Sendable {
    public var objects: [S3ListedObject]
    /// With a delimiter: the distinct key prefixes up to and including the delimiter after `prefix`
    /// (`PREFIX/trips/`), in place of the objects under them.
    public var commonPrefixes: [String] = []
    /// The token of the next page; nil on the last.
    public var nextContinuationToken: String?
}

/// The condition of a write.
public enum S3WriteCondition: Sendable, Equatable {
    case none
    /// `If-None-Match: *`: only if no object has the key.
    case ifNoneMatchAny
    /// `If-Match: ETAG`: only if the object is still the one with this ETag.
    case ifMatch(String)
}

/// The checksum a PUT carries, which the server verifies before it stores the object.
public enum S3Checksum: Sendable, Equatable {
    /// `x-amz-checksum-sha256`.
    case sha256
    /// `Content-MD5`.
    case md5
}

/// An S3 client over AsyncHTTPClient: objects (GET with Range and If-None-Match, HEAD, PUT with a checksum and a
/// condition, DELETE), ListObjectsV2 and multipart uploads (``S3Client`` + Multipart). Requests are signed with
/// ``SigV4``; every failure is a ``FerryError`` that names the setting to fix.
///
/// ```swift
/// let s3 = S3Client(configuration: try S3Configuration.fromEnvironment())
/// let etag = try await s3.put(bucket: "b", key: "k", body: Data("x".utf8), condition: .ifNoneMatchAny)
/// ```
public struct S3Client: Sendable {
    public let configuration: S3Configuration
    let http: HTTPClient
    /// The deadline of one request. Default 60 s.
    public var timeout: Duration = .seconds(60)
    /// The largest answer read into memory. Default 1 GiB.
    public var maxResponseBytes = 1 << 30
    /// The signing time (a test sets a skewed clock).
    var now: @Sendable () -> Date = { Date() }

    public init(configuration: S3Configuration, httpClient: HTTPClient = .shared) {
        self.configuration = configuration
        self.http = httpClient
    }

    struct Response {
        var status: Int
        var headers: HTTPHeaders
        var body: Data

        /// The first value of header `name`.
        func header(_ name: String) -> String? { headers.first(name: name) }
    }

    /// Signs and sends one request; an answer whose status is not in `accept` becomes a ``FerryError``.
    func send(
        _ operation: String, _ method: String, bucket: String, key: String = "", query: [(String, String)] = [],
        headers: [(String, String)] = [], body: Data = Data(), payload: PayloadHash? = nil, accept: Set<Int> = [200]
    ) async throws -> Response {
        var (request, endpoint) = signedRequest(
            method, bucket: bucket, key: key, query: query, headers: headers, payload: payload ?? .of(body))
        if !body.isEmpty || method == "PUT" || method == "POST" {
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        let response: HTTPClientResponse
        let data: Data
        do {
            response = try await http.execute(request, timeout: TimeAmount(timeout))
            data = Data(try await response.body.collect(upTo: maxResponseBytes).readableBytesView)
        } catch {
            throw unreachable(operation, bucket: bucket, key: key, endpoint: endpoint, error)
        }
        let status = Int(response.status.code)
        guard accept.contains(status) else {
            throw failure(response, body: data, operation: operation, bucket: bucket, key: key)
        }
        return Response(status: status, headers: response.headers, body: data)
    }

    /// A request of `method` for `key` in `bucket`, signed (its body, if any, is the caller's to set), and the
    /// endpoint it goes to (`scheme://host`), for error messages.
    func signedRequest(
        _ method: String, bucket: String, key: String, query: [(String, String)] = [],
        headers: [(String, String)] = [], payload: PayloadHash
    ) -> (HTTPClientRequest, endpoint: String) {
        let (scheme, host, path) = configuration.address(bucket: bucket, key: key)
        let signer = SigV4(credentials: configuration.credentials, region: configuration.region)
        let signed =
            [("host", host)] + headers
            + signer.sign(
                method: method, path: path, query: query, headers: [("host", host)] + headers, payload: payload,
                date: now())
        var request = HTTPClientRequest(
            url: "\(scheme)://\(host)\(SigV4.encodePath(path))\(query.isEmpty ? "" : "?" + SigV4.encodeQuery(query))")
        request.method = HTTPMethod(rawValue: method)
        for (name, value) in signed { request.headers.add(name: name, value: value) }
        return (request, "\(scheme)://\(host)")
    }

    /// The error of a request that got no answer: the endpoint could not be reached, or the answer broke off.
    func unreachable(_ operation: String, bucket: String, key: String, endpoint: String, _ error: any Error)
        -> FerryError
    {
        FerryError(
            .network,
            "\(operation) s3://\(bucket)/\(key): could not reach \(endpoint): check the endpoint "
                + "(AWS_ENDPOINT_URL) and the network", underlying: error)
    }

    /// The error of an answer with a status the operation does not accept; `body` is S3's error document, if any.
    func failure(_ response: HTTPClientResponse, body: Data, operation: String, bucket: String, key: String)
        -> FerryError
    {
        let serverTime = response.headers.first(name: "date").flatMap(Self.parseHTTPDate)
        return S3ErrorResponse.parse(status: Int(response.status.code), body: body).ferryError(
            operation: operation, bucket: bucket, key: key.isEmpty ? nil : key,
            accessKeyID: configuration.credentials.accessKeyID, serverTime: serverTime, now: now())
    }

    /// A presigned `GET` URL of `key` in `bucket`, valid for `expires` seconds from now (query-string
    /// authentication, ``SigV4/presign(method:path:query:host:expires:date:)``): anyone holding it may read that one
    /// object until it expires, with no credentials of their own. Nothing is sent.
    public func presignedGetURL(bucket: String, key: String, expires: Int) -> String {
        let (scheme, host, path) = configuration.address(bucket: bucket, key: key)
        let signer = SigV4(credentials: configuration.credentials, region: configuration.region)
        let items = signer.presign(method: "GET", path: path, query: [], host: host, expires: expires, date: now())
        return "\(scheme)://\(host)\(SigV4.encodePath(path))?\(SigV4.encodeQuery(items))"
    }

    // MARK: Objects

    /// Reads an object, or the bytes of `range` (an HTTP `Range` value such as `bytes=0-9`, passed through).
    /// `ifNoneMatch` (an ETag) answers `.notModified` when the object still has it.
    public func get(bucket: String, key: String, range: String? = nil, ifNoneMatch: String? = nil) async throws
        -> S3GetResult
    {
        var headers: [(String, String)] = []
        if let range { headers.append(("range", range)) }
        if let ifNoneMatch { headers.append(("if-none-match", ifNoneMatch)) }
        let response = try await send(
            "GET", "GET", bucket: bucket, key: key, headers: headers, accept: [200, 206, 304])
        if response.status == 304 { return .notModified }
        return .object(
            S3Object(
                body: response.body, etag: response.headers.first(name: "etag"),
                contentRange: response.headers.first(name: "content-range")))
    }

    /// ``get(bucket:key:range:ifNoneMatch:)``, or nil when there is no such object (404).
    public func getIfPresent(bucket: String, key: String, ifNoneMatch: String? = nil) async throws -> S3GetResult? {
        var headers: [(String, String)] = []
        if let ifNoneMatch { headers.append(("if-none-match", ifNoneMatch)) }
        let response = try await send(
            "GET", "GET", bucket: bucket, key: key, headers: headers, accept: [200, 304, 404])
        switch response.status {
        case 304: return .notModified
        case 404: return nil
        default:
            return .object(
                S3Object(
                    body: response.body, etag: response.headers.first(name: "etag"),
                    contentRange: response.headers.first(name: "content-range")))
        }
    }

    /// What the server knows of an object, or nil when there is none.
    public func head(bucket: String, key: String) async throws -> S3ObjectInfo? {
        let response = try await send(
            "HEAD", "HEAD", bucket: bucket, key: key, headers: [("x-amz-checksum-mode", "ENABLED")],
            accept: [200, 404])
        if response.status == 404 { return nil }
        return S3ObjectInfo(
            size: Int(response.headers.first(name: "content-length") ?? "") ?? 0,
            etag: response.headers.first(name: "etag"),
            checksumSHA256: response.headers.first(name: "x-amz-checksum-sha256"))
    }

    /// Writes an object with a checksum the server verifies, under `condition`; returns its ETag. A lost condition
    /// throws ``FerryError/Code/s3PreconditionFailed``.
    @discardableResult
    public func put(
        bucket: String, key: String, body: Data, checksum: S3Checksum = .sha256,
        condition: S3WriteCondition = .none, contentType: String? = nil
    ) async throws -> String {
        let digest = SHA256Digest(body)
        var headers: [(String, String)] = []
        switch checksum {
        case .sha256: headers.append(("x-amz-checksum-sha256", digest.base64))
        case .md5: headers.append(("content-md5", Data(Insecure.MD5.hash(data: body)).base64EncodedString()))
        }
        switch condition {
        case .none: break
        case .ifNoneMatchAny: headers.append(("if-none-match", "*"))
        case .ifMatch(let etag): headers.append(("if-match", etag))
        }
        if let contentType { headers.append(("content-type", contentType)) }
        let response = try await send(
            "PUT", "PUT", bucket: bucket, key: key, headers: headers, body: body, payload: .sha256(digest.hex))
        return response.headers.first(name: "etag") ?? ""
    }

    /// Deletes an object (no error when there is none).
    public func delete(bucket: String, key: String) async throws {
        _ = try await send("DELETE", "DELETE", bucket: bucket, key: key, accept: [200, 204])
    }

    // MARK: Listing

    /// One page (at most `maxKeys`) of the objects whose key starts with `prefix`.
    public func listPage(
        bucket: String, prefix: String, delimiter: String? = nil, continuationToken: String? = nil,
        maxKeys: Int = 1000
    ) async throws -> S3ListPage {
        var query = [("list-type", "2"), ("prefix", prefix), ("max-keys", String(maxKeys))]
        if let delimiter { query.append(("delimiter", delimiter)) }
        if let continuationToken { query.append(("continuation-token", continuationToken)) }
        let response = try await send("LIST", "GET", bucket: bucket, query: query)
        guard let root = S3XMLElement.parse(response.body), root.name == "ListBucketResult" else {
            throw FerryError(.network, "LIST s3://\(bucket)/\(prefix): the answer is not a ListBucketResult")
        }
        let objects = root.all("Contents").map {
            S3ListedObject(
                key: $0.text("Key") ?? "", size: Int($0.text("Size") ?? "") ?? 0, etag: $0.text("ETag") ?? "")
        }
        let truncated = root.text("IsTruncated") == "true"
        var page = S3ListPage(
            objects: objects, nextContinuationToken: truncated ? root.text("NextContinuationToken") : nil)
        page.commonPrefixes = root.all("CommonPrefixes").compactMap { $0.text("Prefix") }
        return page
    }

    /// The distinct key prefixes under `prefix` up to the next `delimiter` (`PREFIX/trips/`, `PREFIX/parks/`),
    /// page by page: one entry per "directory", however many objects it holds.
    public func listPrefixes(bucket: String, prefix: String, delimiter: String = "/") async throws -> [String] {
        var all: [String] = []
        var token: String?
        repeat {
            let page = try await listPage(
                bucket: bucket, prefix: prefix, delimiter: delimiter, continuationToken: token)
            all += page.commonPrefixes
            token = page.nextContinuationToken
        } while token != nil
        return all
    }

    /// Every object whose key starts with `prefix`, page by page.
    public func list(bucket: String, prefix: String, pageSize: Int = 1000) async throws -> [S3ListedObject] {
        var all: [S3ListedObject] = []
        var token: String?
        repeat {
            let page = try await listPage(bucket: bucket, prefix: prefix, continuationToken: token, maxKeys: pageSize)
            all += page.objects
            token = page.nextContinuationToken
        } while token != nil
        return all
    }

    // MARK: Buckets

    /// Creates a bucket (the tests' and the scripts' set-up; Ferry does not create the store's bucket).
    public func createBucket(_ bucket: String) async throws {
        _ = try await send("CREATE BUCKET", "PUT", bucket: bucket)
    }

    /// Deletes an empty bucket.
    public func deleteBucket(_ bucket: String) async throws {
        _ = try await send("DELETE BUCKET", "DELETE", bucket: bucket, accept: [200, 204])
    }

    static func parseHTTPDate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: text)
    }
}

/// A body's SHA-256 in the two spellings S3 wants: hex for `x-amz-content-sha256`, base64 for
/// `x-amz-checksum-sha256`.
struct SHA256Digest {
    var hex: String
    var base64: String

    init(_ body: Data) {
        let digest = SHA256.hash(data: body)
        hex = SigV4.hex(digest)
        base64 = Data(digest).base64EncodedString()
    }
}
