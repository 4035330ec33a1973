import Foundation

/// The times of retention in the bucket: `unreferenced.json` maps each unreferenced object's name to when a
/// publish first saw it unreferenced (ISO 8601, UTC), and a multipart upload says when it was initiated.
enum BucketRetention {
    static func parseDate(_ text: String) -> Date? {
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = fractional.date(from: text) { return date }
        return ISO8601DateFormatter().date(from: text)
    }

    static func formatDate(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }
}
