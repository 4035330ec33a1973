import FerryS3
import Foundation
import Testing

/// The examples of the S3 documentation ("Signature Calculations for the Authorization Header: Transferring Payload
/// in a Single Chunk" and "Query String Authentication"): access key AKIAIOSFODNN7EXAMPLE, 2013-05-24 00:00:00 UTC,
/// bucket examplebucket, us-east-1. scripts/lib/sigv4_check.py compares 300 more requests with botocore.
@Suite struct SigV4Tests {
    let signer = SigV4(
        credentials: S3Credentials(
            accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        region: "us-east-1")
    let date = Date(timeIntervalSince1970: 1_369_353_600)  // 20130524T000000Z
    let host = ("host", "examplebucket.s3.amazonaws.com")
    let credential = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request"

    func authorization(_ added: [(String, String)]) -> String? { added.first { $0.0 == "authorization" }?.1 }

    @Test func getObjectWithRange() {
        let added = signer.sign(
            method: "GET", path: "/test.txt", query: [], headers: [host, ("Range", "bytes=0-9")],
            payload: .of(Data()), date: date)
        #expect(
            authorization(added)
                == credential + ", SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
                + "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
        #expect(added.first { $0.0 == "x-amz-date" }?.1 == "20130524T000000Z")
        #expect(
            added.first { $0.0 == "x-amz-content-sha256" }?.1
                == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    @Test func putObjectWithPayloadAndDollarInKey() {
        let body = Data("Welcome to Amazon S3.".utf8)
        let added = signer.sign(
            method: "PUT", path: "/test$file.text", query: [],
            headers: [
                host, ("Date", "Fri, 24 May 2013 00:00:00 GMT"), ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ],
            payload: .of(body), date: date)
        #expect(
            authorization(added)
                == credential + ", SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class, "
                + "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
        #expect(PayloadHash.of(body).value == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
    }

    @Test func getBucketLifecycleWithEmptyQueryValue() {
        let added = signer.sign(
            method: "GET", path: "/", query: [("lifecycle", "")], headers: [host], payload: .of(Data()), date: date)
        #expect(
            authorization(added)
                == credential + ", SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
                + "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543")
    }

    @Test func listObjectsWithQuerySortedByKey() {
        let added = signer.sign(
            method: "GET", path: "/", query: [("prefix", "J"), ("max-keys", "2")], headers: [host],
            payload: .of(Data()), date: date)
        #expect(
            authorization(added)
                == credential + ", SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
                + "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
    }

    @Test func presignedGet() {
        let items = signer.presign(
            method: "GET", path: "/test.txt", query: [], host: host.1, expires: 86400, date: date)
        #expect(items.last?.0 == "X-Amz-Signature")
        #expect(items.last?.1 == "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404")
        #expect(
            SigV4.encodeQuery(items).hasPrefix(
                "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3"
                    + "%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"))
    }

    @Test func sessionTokenIsSentAndSigned() {
        var withToken = signer
        withToken.credentials.sessionToken = "token/with+chars="
        let added = withToken.sign(
            method: "GET", path: "/test.txt", query: [], headers: [host], payload: .unsigned, date: date)
        #expect(added.first { $0.0 == "x-amz-security-token" }?.1 == "token/with+chars=")
        #expect(
            authorization(added)?.contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,")
                == true)
        #expect(added.first { $0.0 == "x-amz-content-sha256" }?.1 == "UNSIGNED-PAYLOAD")
        #expect(!withToken.credentials.description.contains("token/with"))
        #expect(!withToken.credentials.description.contains("wJalr"))
    }

    @Test func encodesWithS3Rules() {
        #expect(SigV4.encodePath("/b/a key+~%é/日") == "/b/a%20key%2B~%25%C3%A9/%E6%97%A5")
        #expect(SigV4.encodePath("/b//./..") == "/b//./..")
        #expect(SigV4.uriEncode("a/b=c&d") == "a%2Fb%3Dc%26d")
        #expect(
            SigV4.encodeQuery([("list-type", "2"), ("prefix", "a b"), ("uploads", "")])
                == "list-type=2&prefix=a%20b&uploads=")
    }

    @Test func timestampIsUTC() {
        #expect(SigV4.timestamp(Date(timeIntervalSince1970: 0)) == "19700101T000000Z")
        #expect(SigV4.timestamp(Date(timeIntervalSince1970: 1_764_198_245)) == "20251126T230405Z")
    }
}
