import FerryCore
import Foundation

/// A version the app downloads itself, in a background `URLSession` (Apple platforms), and hands to Ferry when the
/// download has finished, possibly in a later launch. ``FerryClient/prepareBackgroundDownload()`` makes one from the
/// server's manifest; ``FerryClient/backgroundRequest(for:)`` gives the request for the session's download task;
/// ``FerryClient/adoptBackgroundDownload(_:file:)`` verifies the finished file as any download is verified and makes
/// it `updated.db` (or `database.db` on the initial sync). See docs/app.md, "Background downloads".
///
/// `Codable`, so the app can keep it with the task (in `taskDescription`, as JSON) until the session's delegate hears
/// that the download finished. It holds no secret: the access token goes into the request only.
///
/// ```swift
/// if let download = try await client.prepareBackgroundDownload() {
///     let task = backgroundSession.downloadTask(with: try await client.backgroundRequest(for: download))
///     task.taskDescription = String(decoding: try JSONEncoder().encode(download), as: UTF8.self)
///     task.resume()
/// }
/// ```
public struct BackgroundDownload: Codable, Sendable, Equatable {
    /// The manifest the version was chosen from: the downloaded file must be its version, byte for byte (its `sha256`
    /// and `size`), of its dataset.
    public var manifest: Manifest
    /// The version's immutable URL (`SERVER/v1/datasets/DATASET/versions/N`).
    public var url: URL

    public init(manifest: Manifest, url: URL) {
        self.manifest = manifest
        self.url = url
    }
}
