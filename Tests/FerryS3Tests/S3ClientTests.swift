import Crypto
import FerryCore
import FerryTestSupport
import Foundation
import Testing

@testable import FerryS3

/// The client against a real SeaweedFS (scripts/test starts it; docs/s3.md says what it supports).
@Suite struct S3ClientTests {
    @Test func putGetRangeHeadDelete() async throws {
        let (s3, bucket) = try await SeaweedFS.freshBucket("objects")
        let key = "dir/a key+~%é.bin"
        let body = pattern(10_000)
        let etag = try await s3.put(bucket: bucket, key: key, body: body)
        #expect(!etag.isEmpty)

        guard case .object(let whole) = try await s3.get(bucket: bucket, key: key) else {
            Issue.record("a plain GET answered 304")
            return
        }
        #expect(whole.body == body)
        #expect(whole.etag == etag)

        guard case .object(let part) = try await s3.get(bucket: bucket, key: key, range: "bytes=2-5") else {
            Issue.record("a ranged GET answered 304")
            return
        }
        #expect(part.body == body[2...5])
        #expect(part.contentRange == "bytes 2-5/10000")

        let info = try #require(try await s3.head(bucket: bucket, key: key))
        #expect(info.size == 10_000)
        #expect(info.etag == etag)
        #expect(info.checksumSHA256 == Data(SHA256.hash(data: body)).base64EncodedString())

        guard case .notModified = try await s3.get(bucket: bucket, key: key, ifNoneMatch: etag) else {
            Issue.record("If-None-Match with the current ETag did not answer 304")
            return
        }
        guard case .object = try await s3.get(bucket: bucket, key: key, ifNoneMatch: "\"0123\"") else {
            Issue.record("If-None-Match with another ETag answered 304")
            return
        }

        try await s3.delete(bucket: bucket, key: key)
        #expect(try await s3.head(bucket: bucket, key: key) == nil)
        let error = await #expect(throws: FerryError.self) { try await s3.get(bucket: bucket, key: key) }
        #expect(error?.code == .notFound)
        try await s3.delete(bucket: bucket, key: key)  // deleting what is gone is no error
    }

    @Test func contentMD5IsAccepted() async throws {
        let (s3, bucket) = try await SeaweedFS.freshBucket("md5")
        try await s3.put(bucket: bucket, key: "m", body: Data("data".utf8), checksum: .md5)
        guard case .object(let object) = try await s3.get(bucket: bucket, key: "m") else {
            Issue.record("GET answered 304")
            return
        }
        #expect(object.body == Data("data".utf8))
    }

    @Test func theServerRejectsAWrongChecksum() async throws {
        let (s3, bucket) = try await SeaweedFS.freshBucket("baddigest")
        let body = Data("data".utf8)
        let wrongSHA = Data(SHA256.hash(data: Data("other".utf8))).base64EncodedString()
        let wrongMD5 = Data(Insecure.MD5.hash(data: Data("other".utf8))).base64EncodedString()
        for header in [("x-amz-checksum-sha256", wrongSHA), ("content-md5", wrongMD5)] {
            let error = await #expect(throws: FerryError.self) {
                try await s3.send("PUT", "PUT", bucket: bucket, key: "k", headers: [header], body: body)
            }
            #expect((error?.underlying as? S3ErrorResponse)?.code == "BadDigest")
        }
        #expect(try await s3.head(bucket: bucket, key: "k") == nil)
    }

    @Test func conditionalPutHasOneWinner() async throws {
        let (s3, bucket) = try await SeaweedFS.freshBucket("conditional")
        // Given two writers of a first version, at the same time.
        let results = await withTaskGroup(of: Result<String, any Error>.self) { group in
            for writer in 0..<2 {
                group.addTask {
                    do {
                        return .success(
                            try await s3.put(
                                bucket: bucket, key: "manifest.json", body: Data("writer \(writer)".utf8),
                                condition: .ifNoneMatchAny))
                    } catch { return .failure(error) }
                }
            }
            var results: [Result<String, any Error>] = []
            for await result in group { results.append(result) }
            return results
        }
        // Then exactly one wins, and the loser is told it lost.
        let winners = results.compactMap { try? $0.get() }
        #expect(winners.count == 1)
        for case .failure(let error) in results {
            #expect((error as? FerryError)?.code == .s3PreconditionFailed)
        }
        let first = try #require(winners.first)

        // If-Match: the writer that read the current ETag wins, one with a stale ETag loses.
        let second = try await s3.put(
            bucket: bucket, key: "manifest.json", body: Data("second".utf8), condition: .ifMatch(first))
        let stale = await #expect(throws: FerryError.self) {
            try await s3.put(
                bucket: bucket, key: "manifest.json", body: Data("stale".utf8), condition: .ifMatch(first))
        }
        #expect(stale?.code == .s3PreconditionFailed)
        let again = await #expect(throws: FerryError.self) {
            try await s3.put(bucket: bucket, key: "manifest.json", body: Data("x".utf8), condition: .ifNoneMatchAny)
        }
        #expect(again?.code == .s3PreconditionFailed)
        guard case .object(let object) = try await s3.get(bucket: bucket, key: "manifest.json") else {
            Issue.record("GET answered 304")
            return
        }
        #expect(object.body == Data("second".utf8))
        #expect(object.etag == second)
    }

    @Test func listsPageByPage() async throws {
        let (s3, bucket) = try await SeaweedFS.freshBucket("list")
        let keys = ["d/a", "d/b b", "d/c+c", "d/é", "d/日本", "d/~t", "d/z%", "other/x"]
        for key in keys { try await s3.put(bucket: bucket, key: key, body: Data(key.utf8)) }

        let first = try await s3.listPage(bucket: bucket, prefix: "d/", maxKeys: 3)
        #expect(first.objects.count == 3)
        #expect(first.nextContinuationToken != nil)
        let all = try await s3.list(bucket: bucket, prefix: "d/", pageSize: 2)
        #expect(Set(all.map(\.key)) == Set(keys.filter { $0.hasPrefix("d/") }))
        #expect(all.count == 7)
        #expect(all.first { $0.key == "d/日本" }?.size == "d/日本".utf8.count)
        #expect(try await s3.list(bucket: bucket, prefix: "nothing/").isEmpty)
    }

    @Test func listsPrefixesWithADelimiterAndGetsNilForAMissingKey() async throws {
        let (s3, bucket) = try await SeaweedFS.freshBucket("prefixes")
        for key in ["s/trips/manifest.json", "s/trips/objects/a", "s/trips/objects/b", "s/parks.v2/objects/c", "s/x"] {
            try await s3.put(bucket: bucket, key: key, body: Data(key.utf8))
        }
        #expect(Set(try await s3.listPrefixes(bucket: bucket, prefix: "s/")) == ["s/trips/", "s/parks.v2/"])
        #expect(try await s3.listPrefixes(bucket: bucket, prefix: "none/").isEmpty)
        #expect(try await s3.getIfPresent(bucket: bucket, key: "s/parks.v2/manifest.json") == nil)
        guard case .object(let object)? = try await s3.getIfPresent(bucket: bucket, key: "s/trips/manifest.json")
        else {
            Issue.record("an existing key was not read")
            return
        }
        #expect(object.body == Data("s/trips/manifest.json".utf8))
        guard
            case .notModified? = try await s3.getIfPresent(
                bucket: bucket, key: "s/trips/manifest.json", ifNoneMatch: object.etag)
        else {
            Issue.record("a matching ETag was not answered 304")
            return
        }
    }

    @Test func multipartUploadWithChecksums() async throws {
        let (s3, bucket) = try await SeaweedFS.freshBucket("multipart")
        let body = pattern(5 << 20 + 1234)
        let id = try await s3.createMultipartUpload(bucket: bucket, key: "big")
        #expect(try await s3.listMultipartUploads(bucket: bucket, prefix: "").map(\.uploadID) == [id])

        // A part whose checksum does not match its bytes is refused.
        let wrong = Data(SHA256.hash(data: Data("other".utf8))).base64EncodedString()
        let refused = await #expect(throws: FerryError.self) {
            try await s3.send(
                "UPLOAD PART", "PUT", bucket: bucket, key: "big", query: [("partNumber", "1"), ("uploadId", id)],
                headers: [("x-amz-checksum-sha256", wrong)], body: body)
        }
        #expect((refused?.underlying as? S3ErrorResponse)?.code == "BadDigest")

        async let one = s3.uploadPart(
            bucket: bucket, key: "big", uploadID: id, partNumber: 1, body: body.prefix(5 << 20))
        async let two = s3.uploadPart(
            bucket: bucket, key: "big", uploadID: id, partNumber: 2, body: body.suffix(from: 5 << 20))
        let parts = try await [two, one]
        try await s3.completeMultipartUpload(bucket: bucket, key: "big", uploadID: id, parts: parts)
        #expect(try await s3.listMultipartUploads(bucket: bucket, prefix: "").isEmpty)
        guard case .object(let object) = try await s3.get(bucket: bucket, key: "big") else {
            Issue.record("GET answered 304")
            return
        }
        #expect(object.body == body)
        #expect(try await s3.head(bucket: bucket, key: "big")?.size == body.count)
    }

    @Test func abortedUploadIsGone() async throws {
        let (s3, bucket) = try await SeaweedFS.freshBucket("abort")
        let kept = try await s3.createMultipartUpload(bucket: bucket, key: "kept")
        let id = try await s3.createMultipartUpload(bucket: bucket, key: "left")
        _ = try await s3.uploadPart(bucket: bucket, key: "left", uploadID: id, partNumber: 1, body: pattern(1000))
        #expect(Set(try await s3.listMultipartUploads(bucket: bucket, prefix: "").map(\.key)) == ["kept", "left"])
        #expect(try await s3.listMultipartUploads(bucket: bucket, prefix: "le").map(\.uploadID) == [id])

        try await s3.abortMultipartUpload(bucket: bucket, key: "left", uploadID: id)
        #expect(try await s3.listMultipartUploads(bucket: bucket, prefix: "").map(\.uploadID) == [kept])
        let completed = await #expect(throws: FerryError.self) {
            try await s3.completeMultipartUpload(bucket: bucket, key: "left", uploadID: id, parts: [])
        }
        #expect(completed?.code == .notFound)
        #expect(try await s3.head(bucket: bucket, key: "left") == nil)
    }

    @Test func aWrongSecretNamesTheSettingAndHidesTheSecret() async throws {
        let (_, bucket) = try await SeaweedFS.freshBucket("secret")
        let secret = "wrong-secret-\(UUID().uuidString)"
        let s3 = S3Client(configuration: try SeaweedFS.configuration(secret: secret))
        let error = await #expect(throws: FerryError.self) {
            try await s3.put(bucket: bucket, key: "k", body: Data("x".utf8))
        }
        #expect(error?.code == .s3Credentials)
        #expect(error?.description.contains("AWS_SECRET_ACCESS_KEY") == true)
        #expect(error?.description.contains(secret) == false)
        #expect((error?.underlying as? S3ErrorResponse)?.code == "SignatureDoesNotMatch")
    }

    @Test func anUnknownAccessKeyNamesTheSetting() async throws {
        let s3 = S3Client(configuration: try SeaweedFS.configuration(accessKey: "AKIANOSUCHKEY0000000"))
        let error = await #expect(throws: FerryError.self) {
            try await s3.get(bucket: "ferry-any", key: "k")
        }
        #expect(error?.code == .s3Credentials)
        #expect(error?.description.contains("AWS_ACCESS_KEY_ID") == true)
        #expect(error?.description.contains("AKIANOSUCHKEY0000000") == true)
        #expect((error?.underlying as? S3ErrorResponse)?.code == "InvalidAccessKeyId")
    }

    @Test func aMissingBucketIsNamed() async throws {
        let s3 = try SeaweedFS.client()
        let bucket = "ferry-missing-\(UUID().uuidString.prefix(8).lowercased())"
        for operation in ["GET", "PUT", "LIST"] {
            let error = await #expect(throws: FerryError.self) {
                switch operation {
                case "GET": _ = try await s3.get(bucket: bucket, key: "k")
                case "PUT": try await s3.put(bucket: bucket, key: "k", body: Data("x".utf8))
                default: _ = try await s3.list(bucket: bucket, prefix: "")
                }
            }
            #expect(error?.code == .notFound, "\(operation)")
            #expect(error?.description.contains("the bucket '\(bucket)' does not exist") == true, "\(operation)")
        }
    }

    @Test func aSkewedClockSaysByHowMuch() async throws {
        var s3 = try SeaweedFS.client()
        s3.now = { Date().addingTimeInterval(-3600) }
        let error = await #expect(throws: FerryError.self) {
            _ = try await s3.list(bucket: "ferry-any", prefix: "")
        }
        #expect(error?.code == .s3ClockSkew)
        #expect(error?.description.contains("the clock is off by") == true)
        #expect(error?.description.contains("behind") == true)
        #expect((error?.underlying as? S3ErrorResponse)?.code == "RequestTimeTooSkewed")
    }

    @Test func anUnreachableEndpointSaysWhere() async throws {
        let configuration = try S3Configuration.fromEnvironment(
            ["AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"], endpoint: "http://127.0.0.1:9")
        var s3 = S3Client(configuration: configuration)
        s3.timeout = .seconds(5)
        let error = await #expect(throws: FerryError.self) {
            _ = try await s3.get(bucket: "ferry-any", key: "k")
        }
        #expect(error?.code == .network)
        #expect(error?.description.contains("could not reach http://127.0.0.1:9") == true)
    }

    /// Leaves two objects that scripts/lib/sigv4_check.py --verify reads back with botocore: one PUT, one multipart,
    /// under keys with a space, unicode, `+`, `~` and `%`.
    @Test func writesObjectsForBotocoreToRead() async throws {
        let s3 = try SeaweedFS.client()
        let bucket = "ferry-verify"
        do { try await s3.createBucket(bucket) } catch let error as FerryError {
            // A second run in the same server: the bucket is there already.
            let code = (error.underlying as? S3ErrorResponse)?.code
            guard code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" else { throw error }
        }
        try await s3.put(bucket: bucket, key: "single/ünï code+~%.bin", body: pattern(100_000))
        let big = pattern(6 << 20 + 123)
        let id = try await s3.createMultipartUpload(bucket: bucket, key: "multi/日本 +~%.bin")
        var parts: [S3UploadedPart] = []
        for (index, start) in stride(from: 0, to: big.count, by: 5 << 20).enumerated() {
            parts.append(
                try await s3.uploadPart(
                    bucket: bucket, key: "multi/日本 +~%.bin", uploadID: id, partNumber: index + 1,
                    body: big[start..<min(start + (5 << 20), big.count)]))
        }
        try await s3.completeMultipartUpload(bucket: bucket, key: "multi/日本 +~%.bin", uploadID: id, parts: parts)
    }
}

@Suite struct S3ConfigurationTests {
    @Test func parsesLocations() throws {
        let location = try S3Location(parsing: "s3://ferry-store/prod/eu")
        #expect(location.bucket == "ferry-store")
        #expect(location.prefix == "prod/eu/")
        #expect(location.key("cities/manifest.json") == "prod/eu/cities/manifest.json")
        #expect(try S3Location(parsing: "s3://ferry-store").prefix == "")
        #expect(try S3Location(parsing: "s3://ferry-store/").prefix == "")
        #expect(try S3Location(parsing: "s3://ferry-store/a/").prefix == "a/")
        for bad in ["ferry-store", "s3://", "s3:///x", "s3://Upper", "s3://a", "s3://-bad", "s3://bad_name/x"] {
            #expect(throws: FerryError.self, "\(bad)") { try S3Location(parsing: bad) }
        }
    }

    @Test func readsTheAWSVariables() throws {
        let configuration = try S3Configuration.fromEnvironment([
            "AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "AWS_SESSION_TOKEN": "tok",
            "AWS_REGION": "eu-west-3",
        ])
        #expect(
            configuration.credentials
                == S3Credentials(accessKeyID: "AKIA1", secretAccessKey: "s3cr3t", sessionToken: "tok"))
        #expect(configuration.region == "eu-west-3")
        #expect(configuration.endpoint == nil)
        #expect(!configuration.pathStyle)
        #expect(
            parts(configuration.address(bucket: "b", key: "k/x")) == ["https", "b.s3.eu-west-3.amazonaws.com", "/k/x"])
        #expect(!configuration.description.contains("s3cr3t"))
        #expect(!configuration.description.contains("tok"))

        let local = try S3Configuration.fromEnvironment(
            ["AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b", "AWS_ENDPOINT_URL": "http://127.0.0.1:8333"])
        #expect(local.region == "us-east-1")
        #expect(local.pathStyle)
        #expect(parts(local.address(bucket: "b", key: "k")) == ["http", "127.0.0.1:8333", "/b/k"])
        #expect(parts(local.address(bucket: "b", key: "")) == ["http", "127.0.0.1:8333", "/b"])
        let explicit = try S3Configuration.fromEnvironment(
            ["AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b", "AWS_ENDPOINT_URL": "http://ignored:1"],
            endpoint: "https://minio.example:443")
        #expect(parts(explicit.address(bucket: "b", key: "k")) == ["https", "minio.example", "/b/k"])
    }

    func parts(_ address: (scheme: String, host: String, path: String)) -> [String] {
        [address.scheme, address.host, address.path]
    }

    @Test func namesMissingCredentialsAndBadSettings() throws {
        let none = #expect(throws: FerryError.self) { try S3Configuration.fromEnvironment([:]) }
        #expect(none?.code == .s3Credentials)
        #expect(none?.description.contains("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") == true)
        #expect(none?.description.contains("(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set)") == true)
        let noSecret = #expect(throws: FerryError.self) {
            try S3Configuration.fromEnvironment(["AWS_ACCESS_KEY_ID": "a"])
        }
        #expect(noSecret?.description.contains("(AWS_SECRET_ACCESS_KEY is not set)") == true)
        let endpoint = #expect(throws: FerryError.self) {
            try S3Configuration.fromEnvironment(
                ["AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"], endpoint: "ftp://host/path")
        }
        #expect(endpoint?.description.contains("AWS_ENDPOINT_URL") == true)
        let region = #expect(throws: FerryError.self) {
            try S3Configuration.fromEnvironment(
                ["AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b", "AWS_REGION": "eu west"])
        }
        #expect(region?.description.contains("AWS_REGION") == true)
    }

    @Test func parsesErrorBodies() {
        let body = Data(
            """
            <?xml version="1.0" encoding="UTF-8"?>
            <Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message>\
            <BucketName>b1</BucketName><RequestId>R1</RequestId></Error>
            """.utf8)
        let response = S3ErrorResponse.parse(status: 404, body: body)
        #expect(
            response
                == S3ErrorResponse(
                    status: 404, code: "NoSuchBucket", message: "The specified bucket does not exist", requestID: "R1"))
        #expect(S3ErrorResponse.parse(status: 403, body: Data()).code == "")
        let head = S3ErrorResponse.parse(status: 403, body: Data()).ferryError(
            operation: "HEAD", bucket: "b1", key: "k", accessKeyID: "AKIA1", serverTime: nil)
        #expect(head.code == .s3Credentials)
    }
}
