import FerryCore
import FerryMerge
import FerryServer
import Logging

extension ServerConfiguration {
    /// Every limit the server runs with, named as `ferry serve`'s options name them, read back from the
    /// configuration (so a test or an operator sees what the server actually got, not what was typed). Durations in
    /// seconds; an absent one is `0`.
    ///
    /// ```swift
    /// logger.info("ferry serve limits", metadata: configuration.limitsMetadata)
    /// ```
    public var limitsMetadata: Logger.Metadata {
        func seconds(_ duration: Duration?) -> Logger.MetadataValue {
            guard let duration else { return "0" }
            let seconds = duration.inSeconds
            return .string(seconds == seconds.rounded() ? "\(Int64(seconds))" : "\(seconds)")
        }
        var limits: Logger.Metadata = [
            "max-body-bytes": "\(changeLimits.maxBodyBytes)",
            "max-changes": "\(changeLimits.maxChanges)",
            "max-header-bytes": "\(maxHeaderBytes)",
            "header-timeout": seconds(headerTimeout),
            "idle-timeout": seconds(idleTimeout),
            "drain-timeout": seconds(drainTimeout),
            "download-buffer-bytes": "\(downloadBufferBytes)",
            "token-cache-ttl": seconds(tokenCacheTTL),
        ]
        if let database {
            limits["change-retention"] = seconds(database.changeRetention)
            limits["retention-sweep-interval"] = seconds(database.retentionSweepInterval)
            limits["device-retention"] = seconds(database.deviceRetention)
            limits["merger-connections"] = "\(database.mergerConnections)"
        }
        return limits
    }
}
