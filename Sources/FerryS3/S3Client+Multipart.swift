import FerryCore
import Foundation

/// A part uploaded with ``S3Client/uploadPart(bucket:key:uploadID:partNumber:body:)``.
public struct S3UploadedPart: Sendable, Equatable {
    public var partNumber: Int
    public var etag: String
    /// The part's SHA-256 (base64), which the server verified.
    public var checksumSHA256: String
}

/// A multipart upload that was started and neither completed nor aborted.
public struct S3MultipartUpload: Sendable, Equatable {
    public var key: String
    public var uploadID: String
    /// When it started, as the server wrote it (ISO 8601).
    public var initiated: String
}

extension S3Client {
    /// Starts a multipart upload whose parts carry SHA-256 checksums; returns its upload id.
    public func createMultipartUpload(bucket: String, key: String) async throws -> String {
        let response = try await send(
            "CREATE UPLOAD", "POST", bucket: bucket, key: key, query: [("uploads", "")],
            headers: [("x-amz-checksum-algorithm", "SHA256")])
        guard let id = S3XMLElement.parse(response.body)?.text("UploadId"), !id.isEmpty else {
            throw FerryError(.network, "CREATE UPLOAD s3://\(bucket)/\(key): the answer has no UploadId")
        }
        return id
    }

    /// Uploads part `partNumber` (1…10,000) with its SHA-256, which the server verifies.
    public func uploadPart(bucket: String, key: String, uploadID: String, partNumber: Int, body: Data) async throws
        -> S3UploadedPart
    {
        let digest = SHA256Digest(body)
        let response = try await send(
            "UPLOAD PART \(partNumber)", "PUT", bucket: bucket, key: key,
            query: [("partNumber", String(partNumber)), ("uploadId", uploadID)],
            headers: [("x-amz-checksum-sha256", digest.base64)], body: body, payload: .sha256(digest.hex))
        return S3UploadedPart(
            partNumber: partNumber, etag: response.header("etag") ?? "", checksumSHA256: digest.base64)
    }

    /// Completes an upload from its parts (in part order), under `condition`; returns the object's ETag.
    @discardableResult
    public func completeMultipartUpload(
        bucket: String, key: String, uploadID: String, parts: [S3UploadedPart], condition: S3WriteCondition = .none
    ) async throws -> String {
        var xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for part in parts.sorted(by: { $0.partNumber < $1.partNumber }) {
            xml +=
                "<Part><PartNumber>\(part.partNumber)</PartNumber><ETag>\(xmlEscaped(part.etag))</ETag>"
                + "<ChecksumSHA256>\(part.checksumSHA256)</ChecksumSHA256></Part>"
        }
        xml += "</CompleteMultipartUpload>"
        var headers: [(String, String)] = [("content-type", "application/xml")]
        switch condition {
        case .none: break
        case .ifNoneMatchAny: headers.append(("if-none-match", "*"))
        case .ifMatch(let etag): headers.append(("if-match", etag))
        }
        let response = try await send(
            "COMPLETE UPLOAD", "POST", bucket: bucket, key: key, query: [("uploadId", uploadID)], headers: headers,
            body: Data(xml.utf8))
        // S3 may answer 200 and put the error in the body (it fails after it started answering).
        let root = S3XMLElement.parse(response.body)
        if root?.name == "Error" {
            throw S3ErrorResponse.parse(status: response.status, body: response.body).ferryError(
                operation: "COMPLETE UPLOAD", bucket: bucket, key: key,
                accessKeyID: configuration.credentials.accessKeyID, serverTime: nil)
        }
        return root?.text("ETag") ?? response.header("etag") ?? ""
    }

    /// Aborts an upload and frees its parts.
    public func abortMultipartUpload(bucket: String, key: String, uploadID: String) async throws {
        _ = try await send(
            "ABORT UPLOAD", "DELETE", bucket: bucket, key: key, query: [("uploadId", uploadID)], accept: [200, 204])
    }

    /// The uploads in progress whose key starts with `prefix`, page by page.
    public func listMultipartUploads(bucket: String, prefix: String) async throws -> [S3MultipartUpload] {
        var all: [S3MultipartUpload] = []
        var markers: (key: String, upload: String)?
        while true {
            var query = [("uploads", ""), ("prefix", prefix)]
            if let markers { query += [("key-marker", markers.key), ("upload-id-marker", markers.upload)] }
            let response = try await send("LIST UPLOADS", "GET", bucket: bucket, query: query)
            guard let root = S3XMLElement.parse(response.body), root.name == "ListMultipartUploadsResult" else {
                throw FerryError(.network, "LIST UPLOADS s3://\(bucket)/\(prefix): the answer is not a list of uploads")
            }
            all += root.all("Upload").map {
                S3MultipartUpload(
                    key: $0.text("Key") ?? "", uploadID: $0.text("UploadId") ?? "",
                    initiated: $0.text("Initiated") ?? "")
            }
            guard root.text("IsTruncated") == "true", let key = root.text("NextKeyMarker"),
                let upload = root.text("NextUploadIdMarker")
            else { return all }
            markers = (key, upload)
        }
    }
}
