import FerryCore

/// A server that answered 429 or 5xx with `Retry-After: <seconds>`: the check waits that long and tries again, as
/// long as the total stays within `Configuration.download.retryAfterLimit`; past it, `failure` is reported.
struct ServerAsksToWait: Error {
    let seconds: Int
    let failure: FerryError
}

extension FerryError {
    /// The error, saying how long the server asked to wait.
    func waiting(_ seconds: Int) -> FerryError {
        var error = self
        error.message += " (it asks to retry after \(seconds) s, longer than this client waits)"
        return error
    }
}
