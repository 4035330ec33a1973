import FerryClient
import Foundation

extension FerryDatabase {
    /// Hands Ferry the file a background download of `download` wrote (see
    /// `FerryClient.adoptBackgroundDownload(_:file:)`,
    /// which verifies it as any download): like
    /// ``checkForUpdates()``, the version is then applied at once, in place, in ``ApplyMode/automatic`` and waits as
    /// the pending update otherwise, and the status says so. docs/app.md, "Background downloads", has the session
    /// side.
    ///
    /// ```swift
    /// let result = try await ferry.adoptBackgroundDownload(download, file: keptFile)
    /// ```
    @discardableResult
    public func adoptBackgroundDownload(_ download: BackgroundDownload, file: URL) async throws -> FetchResult {
        let result: FetchResult
        do {
            result = try await client.adoptBackgroundDownload(download, file: file)
        } catch {
            try await fail(error)
        }
        if applyMode == .automatic, result.status.state == .updatePending {
            try await applyPendingUpdate()
        }
        try await refreshStatus()
        return result
    }
}
