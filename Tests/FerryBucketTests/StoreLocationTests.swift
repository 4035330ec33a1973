import FerryBucket
import FerryCore
import FerryS3
import FerryTestSupport
import Foundation
import Testing

@Suite struct StoreLocationTests {
    @Test func parsesBucketsDirectoriesAndRefusesOtherSchemes() throws {
        #expect(
            try StoreLocation(parsing: "s3://ferry-store/prod")
                == .bucket(try S3Location(parsing: "s3://ferry-store/prod/")))
        #expect(try StoreLocation(parsing: "snapshots") == .directory(URL(fileURLWithPath: "snapshots")))
        #expect(
            try StoreLocation(parsing: "dir/with://inside") == .directory(URL(fileURLWithPath: "dir/with://inside")))
        let error = ferryError { _ = try StoreLocation(parsing: "gs://bucket/prefix") }
        #expect(error?.code == .badInput)
        #expect(error?.message.contains("gs://") == true)
        #expect(throws: FerryError.self) { try StoreLocation(parsing: "s3://A_Bad_Bucket/x") }
    }

    @Test func layoutIsTheDiskLayoutUnderThePrefix() throws {
        let layout = BucketLayout(location: try S3Location(parsing: "s3://ferry-store/prod"))
        #expect(layout.manifestKey(dataset: "trips") == "prod/trips/manifest.json")
        #expect(layout.objectKey(dataset: "trips", name: "ab.sqlite.gz") == "prod/trips/objects/ab.sqlite.gz")
        #expect(layout.objectsPrefix(dataset: "trips") == "prod/trips/objects/")
        #expect(
            BucketLayout(location: try S3Location(bucket: "ferry-store")).manifestKey(dataset: "t") == "t/manifest.json"
        )
    }

    @Test func theTestServerIsThere() throws {
        // The bucket tests need scripts/test's SeaweedFS; without it they fail here first, naming the variables.
        _ = try SeaweedFS.configuration()
    }
}
