import FerryCore
import FerryS3
import Foundation

/// The SeaweedFS that `scripts/test` starts (`ferry_start_seaweedfs` in scripts/lib/common.sh): its S3 endpoint and
/// the one identity it knows. A test that needs it fails, never skips, when it is not there.
public enum SeaweedFS {
    public static func variable(_ name: String) throws -> String {
        guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else {
            throw FerryError(
                .badInput,
                "\(name) is not set: run the tests with scripts/test, which starts a private SeaweedFS "
                    + "(FERRY_TEST_S3_ENDPOINT, FERRY_TEST_S3_ACCESS_KEY, FERRY_TEST_S3_SECRET_KEY)")
        }
        return value
    }

    /// The configuration of the test server, with another access key or secret when given.
    public static func configuration(accessKey: String? = nil, secret: String? = nil) throws -> S3Configuration {
        let endpoint = try variable("FERRY_TEST_S3_ENDPOINT")
        return try S3Configuration.fromEnvironment(
            [
                "AWS_ACCESS_KEY_ID": try accessKey ?? variable("FERRY_TEST_S3_ACCESS_KEY"),
                "AWS_SECRET_ACCESS_KEY": try secret ?? variable("FERRY_TEST_S3_SECRET_KEY"),
            ], endpoint: endpoint)
    }

    public static func client() throws -> S3Client { S3Client(configuration: try configuration()) }

    /// A new empty bucket for one test.
    public static func freshBucket(_ label: String) async throws -> (S3Client, String) {
        let client = try client()
        let bucket = "ferry-\(label)-\(UUID().uuidString.prefix(8).lowercased())"
        try await client.createBucket(bucket)
        return (client, bucket)
    }
}
