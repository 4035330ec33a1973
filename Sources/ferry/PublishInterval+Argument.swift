import ArgumentParser
import FerryCore
import FerryPublisher

extension PublishInterval {
    /// Parses a duration option (`30s`, `15m`, `2h`, `30d`). The library's error names its own key; on the command
    /// line ArgumentParser names the option, so only the message is passed on.
    static func argument(_ text: String) throws -> PublishInterval {
        do {
            return try PublishInterval(parsing: text)
        } catch let error as FerryError {
            throw ValidationError(error.message)
        }
    }
}
