import FerryCore
import FerryS3
import Foundation

/// Where a snapshot store lives, as `--store` names it: a directory, or a bucket (`s3://BUCKET/PREFIX`, issue 24).
///
/// ```swift
/// let location = try StoreLocation(parsing: "s3://ferry-store/prod")  // .bucket(s3://ferry-store/prod/)
/// let local = try StoreLocation(parsing: "snapshots")                 // .directory(…/snapshots)
/// ```
public enum StoreLocation: Sendable, Equatable, CustomStringConvertible {
    case directory(URL)
    case bucket(S3Location)

    /// `s3://…` is a bucket; any other `scheme://` is refused (it would otherwise become a directory named
    /// `scheme:`); anything else is a directory.
    public init(parsing store: String) throws {
        if store.hasPrefix("s3://") {
            self = .bucket(try S3Location(parsing: store))
            return
        }
        if let separator = store.range(of: "://"), !store[..<separator.lowerBound].contains("/") {
            let scheme = store[..<separator.lowerBound]
            throw FerryError(
                .badInput,
                "--store \(store): '\(scheme)://' is not a store Ferry knows; give a directory or s3://BUCKET/PREFIX")
        }
        self = .directory(URL(fileURLWithPath: store))
    }

    public var description: String {
        switch self {
        case .directory(let url): url.path
        case .bucket(let location): location.description
        }
    }
}

/// The store's layout in a bucket: the one on disk, under the location's prefix, so a CDN or nginx can pull objects
/// straight from the bucket by the names the server uses (`/v1/datasets/{d}/objects/{object}`).
///
/// ```
/// PREFIX/DATASET/manifest.json
/// PREFIX/DATASET/objects/<sha256>.sqlite | <sha256>.sqlite.gz | <sha256>.rows | <sha256>.patch.gz
/// ```
public struct BucketLayout: Sendable, Equatable {
    public let location: S3Location

    public init(location: S3Location) { self.location = location }

    public var bucket: String { location.bucket }
    /// The prefix every dataset lives under ("" or ending in `/`).
    public var storePrefix: String { location.prefix }
    public func datasetPrefix(_ dataset: String) -> String { location.key("\(dataset)/") }
    public func manifestKey(dataset: String) -> String { location.key("\(dataset)/manifest.json") }
    public func objectsPrefix(dataset: String) -> String { location.key("\(dataset)/objects/") }
    /// `name` is an object's file name in `objects/`, e.g. `<sha256>.sqlite.gz`.
    public func objectKey(dataset: String, name: String) -> String { location.key("\(dataset)/objects/\(name)") }
}
