import FerryCore
import Foundation

/// `DIR/.ferry/partial.json`: the dataset, the snapshot a partial download was promised to become, and where its
/// bytes come from (the version URL and the representation: the SQLite file or its gzip copy, with its ETag).
///
/// ```json
/// {"dataset":"trips","expected":{"sha256":"…","size":49152,"version":3},
///  "source":{"url":"http://…/v1/datasets/trips/versions/3","encoding":"gzip","size":8120,"etag":"\"…-gzip\""}}
/// ```
struct PartialRecord: Codable, Equatable, Sendable {
    var dataset: String
    var expected: ExpectedSnapshot
    /// Nil in a record written by a client before version URLs: then the bytes are the SQLite file's own (identity)
    /// and resume from the version URL of `expected.version`.
    var source: TransferSource? = nil
}
