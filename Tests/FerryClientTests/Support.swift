// Shared helpers for this target live in FerryTestSupport.
@_exported import FerryTestSupport

/// Waits until `condition` holds, checking every 20 ms, for at most `seconds`: true when it held, false at the
/// deadline. For events a test cannot await directly (a background push that empties the outbox).
func eventually(seconds: Double = 20, _ condition: () async throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}
