import FerryCore
import Foundation

extension FerryError.Code {
    /// S3 refused the credentials: none set, an unknown access key, a wrong secret, or access denied.
    public static let s3Credentials = FerryError.Code("s3-credentials")
    /// A conditional write or read lost: the object changed (`If-Match`) or already exists (`If-None-Match: *`).
    public static let s3PreconditionFailed = FerryError.Code("s3-precondition-failed")
    /// This machine's clock and the S3 server's differ by more than S3 allows (15 minutes).
    public static let s3ClockSkew = FerryError.Code("s3-clock-skew")
}

/// What an S3 server answered to a failed request: the HTTP status and the fields of its XML error body. Carries no
/// secret (the server's StringToSign and signature are not kept).
public struct S3ErrorResponse: Error, Sendable, CustomStringConvertible, Equatable {
    public var status: Int
    /// S3's error code (`NoSuchKey`, `SignatureDoesNotMatch`, …); empty when the answer had no body (HEAD).
    public var code: String
    public var message: String
    public var requestID: String?

    public var description: String {
        "HTTP \(status)\(code.isEmpty ? "" : " \(code)")\(message.isEmpty ? "" : ": \(message)")"
            + (requestID.map { ", request id \($0)" } ?? "")
    }

    /// The error of an answer with this status and body.
    static func parse(status: Int, body: Data) -> S3ErrorResponse {
        let root = S3XMLElement.parse(body)
        return S3ErrorResponse(
            status: status, code: root?.text("Code") ?? "", message: root?.text("Message") ?? "",
            requestID: root?.text("RequestId"))
    }

    /// A ``FerryError`` that says what went wrong and which setting fixes it. `bucket` and `key` name the object;
    /// `serverTime` is the answer's `Date` header, for a clock error.
    func ferryError(
        operation: String, bucket: String, key: String?, accessKeyID: String, serverTime: Date?, now: Date = Date()
    ) -> FerryError {
        let what = key.map { "s3://\(bucket)/\($0)" } ?? "s3://\(bucket)"
        let code = self.code.isEmpty ? Self.codeForStatus(status) : self.code
        switch code {
        case "NoSuchBucket":
            return FerryError(
                .notFound,
                "the bucket '\(bucket)' does not exist: create it, or fix the bucket in the store URL (s3://BUCKET/…)",
                underlying: self)
        case "NoSuchKey":
            return FerryError(.notFound, "\(operation) \(what): no such object", underlying: self)
        case "NoSuchUpload":
            return FerryError(.notFound, "\(operation) \(what): no such multipart upload", underlying: self)
        case "InvalidAccessKeyId":
            return FerryError(
                .s3Credentials,
                "\(operation) \(what): the server knows no access key '\(accessKeyID)': fix AWS_ACCESS_KEY_ID",
                underlying: self)
        case "SignatureDoesNotMatch":
            return FerryError(
                .s3Credentials,
                "\(operation) \(what): the request's signature does not match (a wrong secret key for '\(accessKeyID)'): "
                    + "fix AWS_SECRET_ACCESS_KEY", underlying: self)
        case "ExpiredToken", "InvalidToken", "TokenRefreshRequired":
            return FerryError(
                .s3Credentials,
                "\(operation) \(what): the session token is expired or invalid: renew AWS_SESSION_TOKEN (and the keys "
                    + "that go with it)", underlying: self)
        case "AccessDenied":
            return FerryError(
                .s3Credentials,
                "\(operation) \(what): access denied for '\(accessKeyID)': grant it access to the bucket, or fix "
                    + "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", underlying: self)
        case "RequestTimeTooSkewed":
            let skew = serverTime.map { Int(now.timeIntervalSince($0).rounded()) }
            let by =
                skew.map { "\(abs($0)) s (\($0 > 0 ? "ahead of" : "behind") the server's)" } ?? "more than 15 minutes"
            return FerryError(
                .s3ClockSkew,
                "\(operation) \(what): the clock is off by \(by): set this machine's clock (NTP)", underlying: self)
        case "PreconditionFailed", "ConditionalRequestConflict":
            return FerryError(
                .s3PreconditionFailed, "\(operation) \(what): the object changed (conditional write lost)",
                underlying: self)
        default:
            return FerryError(.network, "\(operation) \(what) failed", underlying: self)
        }
    }

    /// A HEAD has no body: the status alone says what S3 would have.
    static func codeForStatus(_ status: Int) -> String {
        switch status {
        case 403: "AccessDenied"
        case 404: "NoSuchKey"
        case 412: "PreconditionFailed"
        default: ""
        }
    }
}
