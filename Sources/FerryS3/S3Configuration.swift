import FerryCore
import Foundation

/// A bucket and a key prefix, parsed from `s3://BUCKET/PREFIX`. The prefix has no leading `/` and, unless empty,
/// ends with one.
///
/// ```swift
/// let location = try S3Location(parsing: "s3://ferry-store/prod")
/// location.key("cities/manifest.json") // "prod/cities/manifest.json"
/// ```
public struct S3Location: Sendable, Equatable, CustomStringConvertible {
    public var bucket: String
    public var prefix: String

    public init(bucket: String, prefix: String = "") throws {
        try Self.validate(bucket: bucket)
        self.bucket = bucket
        let trimmed = prefix.drop { $0 == "/" }
        self.prefix = trimmed.isEmpty || trimmed.hasSuffix("/") ? String(trimmed) : trimmed + "/"
    }

    public init(parsing url: String) throws {
        guard url.hasPrefix("s3://") else {
            throw FerryError(.badInput, "'\(url)' is not an S3 URL: write s3://BUCKET or s3://BUCKET/PREFIX")
        }
        let rest = url.dropFirst("s3://".count)
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let bucket = String(rest[..<slash])
        guard !bucket.isEmpty else {
            throw FerryError(.badInput, "'\(url)' names no bucket: write s3://BUCKET or s3://BUCKET/PREFIX")
        }
        try self.init(bucket: bucket, prefix: slash < rest.endIndex ? String(rest[rest.index(after: slash)...]) : "")
    }

    /// The full key of `relative` (a store path such as `DATASET/manifest.json`).
    public func key(_ relative: String) -> String { prefix + relative }

    public var description: String { "s3://\(bucket)/\(prefix)" }

    /// S3's bucket naming rules: 3–63 characters of `a-z 0-9 . -`, starting and ending with a letter or digit.
    static func validate(bucket: String) throws {
        let allowed = bucket.utf8.allSatisfy {
            ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z")) || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9"))
                || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".")
        }
        guard (3...63).contains(bucket.utf8.count), allowed, bucket.first != "-", bucket.first != ".",
            bucket.last != "-", bucket.last != "."
        else {
            throw FerryError(
                .badInput,
                "'\(bucket)' is not a valid bucket name: 3 to 63 characters of a-z, 0-9, '.' and '-', starting and "
                    + "ending with a letter or digit")
        }
    }
}

/// How to reach S3: credentials, region, endpoint and addressing style.
///
/// ```swift
/// let configuration = try S3Configuration.fromEnvironment()  // AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, …
/// ```
public struct S3Configuration: Sendable, CustomStringConvertible {
    public var credentials: S3Credentials
    /// Default `us-east-1`.
    public var region: String
    /// `http(s)://host[:port]` of an S3-compatible server; nil for AWS (`https://BUCKET.s3.REGION.amazonaws.com`).
    public var endpoint: URL?
    /// `http://endpoint/BUCKET/KEY` when true, `http://BUCKET.endpoint/KEY` when false. Default: true when an
    /// endpoint is given, false otherwise.
    public var pathStyle: Bool

    public init(credentials: S3Credentials, region: String = "us-east-1", endpoint: URL? = nil, pathStyle: Bool? = nil)
        throws
    {
        if let endpoint {
            guard let scheme = endpoint.scheme?.lowercased(), scheme == "http" || scheme == "https",
                endpoint.host?.isEmpty == false, endpoint.path.isEmpty || endpoint.path == "/", endpoint.query == nil
            else {
                throw FerryError(
                    .badInput,
                    "the S3 endpoint '\(endpoint.absoluteString)' is not http(s)://HOST[:PORT]: fix AWS_ENDPOINT_URL "
                        + "or the endpoint setting")
            }
        }
        guard !region.isEmpty, region.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" }) else {
            throw FerryError(.badInput, "'\(region)' is not an AWS region: fix AWS_REGION (e.g. us-east-1)")
        }
        self.credentials = credentials
        self.region = region
        self.endpoint = endpoint
        self.pathStyle = pathStyle ?? (endpoint != nil)
    }

    /// The configuration from the AWS variables: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`
    /// (optional), `AWS_REGION` (default `us-east-1`), and the endpoint from `endpoint` or else `AWS_ENDPOINT_URL`.
    public static func fromEnvironment(
        _ environment: [String: String] = ProcessInfo.processInfo.environment, endpoint: String? = nil
    ) throws -> S3Configuration {
        func value(_ name: String) -> String? {
            environment[name].flatMap { $0.trimmingCharacters(in: .whitespaces).isEmpty ? nil : $0 }
        }
        let missing = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"].filter { value($0) == nil }
        if !missing.isEmpty {
            throw FerryError(
                .s3Credentials,
                "no S3 credentials (\(missing.joined(separator: " and ")) \(missing.count == 1 ? "is" : "are") not set): set AWS_ACCESS_KEY_ID and "
                    + "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials)")
        }
        var endpointURL: URL?
        if let text = endpoint ?? value("AWS_ENDPOINT_URL") {
            guard let url = URL(string: text) else {
                throw FerryError(.badInput, "the S3 endpoint '\(text)' is not a URL: fix AWS_ENDPOINT_URL")
            }
            endpointURL = url
        }
        return try S3Configuration(
            credentials: S3Credentials(
                accessKeyID: value("AWS_ACCESS_KEY_ID")!, secretAccessKey: value("AWS_SECRET_ACCESS_KEY")!,
                sessionToken: value("AWS_SESSION_TOKEN")),
            region: value("AWS_REGION") ?? "us-east-1", endpoint: endpointURL)
    }

    public var description: String {
        "S3Configuration(region: \(region), endpoint: \(endpoint?.absoluteString ?? "AWS"), "
            + "\(pathStyle ? "path-style" : "virtual-hosted"), \(credentials))"
    }

    /// The scheme, host (with a non-default port) and path of a request for `key` in `bucket` (`key` empty: the
    /// bucket itself).
    func address(bucket: String, key: String) -> (scheme: String, host: String, path: String) {
        let scheme = endpoint?.scheme?.lowercased() ?? "https"
        var host = endpoint?.host ?? "s3.\(region).amazonaws.com"
        if let port = endpoint?.port, !(scheme == "http" && port == 80), !(scheme == "https" && port == 443) {
            host += ":\(port)"
        }
        if pathStyle { return (scheme, host, key.isEmpty ? "/\(bucket)" : "/\(bucket)/\(key)") }
        return (scheme, "\(bucket).\(host)", "/\(key)")
    }
}
