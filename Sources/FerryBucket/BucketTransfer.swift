import FerryPublisher

/// What a publish into a bucket moved (``BucketPublisher``), the ``PublishResult/report`` of its result:
/// `publish --json` prints it under `bucket`,
/// `{"uploaded","skipped","uploadedBytes","uploadSeconds","downloaded","downloadedBytes","downloadSeconds","deleted",
/// "abortedUploads","notes"}`.
///
/// ```swift
/// let result = try await bucketPublisher.publish(changedTables: nil)
/// if let moved = result.bucket { print("\(moved.uploaded) object(s) uploaded") }
/// ```
public struct BucketTransfer: PublishReport, Equatable {
    /// `bucket`, the key of `publish --json`.
    public static let key = "bucket"

    /// Objects uploaded (snapshots, gzip copies, patches, row indexes).
    public var uploaded = 0
    /// Objects the new manifest names that the bucket already had.
    public var skipped = 0
    public var uploadedBytes: Int64 = 0
    /// Wall time of the uploads of objects (not the manifest), in seconds: what `scripts/bench s3` compares with
    /// `aws s3 cp` of the same files.
    public var uploadSeconds = 0.0
    /// Files brought into the local cache from the bucket before the publish (a cold or stale cache).
    public var downloaded = 0
    public var downloadedBytes: Int64 = 0
    /// Wall time of bringing the cache in line with the bucket, in seconds.
    public var downloadSeconds = 0.0
    /// Unreferenced objects deleted after their grace period.
    public var deleted = 0
    /// Multipart uploads older than the grace period that were aborted.
    public var abortedUploads = 0
    /// What the publish could not use and what it did instead (e.g. no row index in the bucket: a full build).
    public var notes: [String] = []

    public init() {}
}

extension PublishResult {
    /// For a publish into a bucket, what moved: the ``PublishResult/report`` when it is a ``BucketTransfer``; nil
    /// for a publish into a store directory.
    ///
    /// ```swift
    /// let uploaded = result.bucket?.uploaded ?? 0
    /// ```
    public var bucket: BucketTransfer? {
        get { report as? BucketTransfer }
        set { report = newValue }
    }
}
