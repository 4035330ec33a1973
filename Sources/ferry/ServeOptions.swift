import ArgumentParser
import FerryBucket
import FerryCore
import FerryMerge
import FerryServer
import FerryService
import Foundation

/// `ferry serve`'s store: a directory, or a bucket and how its replica reads it.
struct ServeStoreOptions: ParsableArguments {
    @Option(
        name: .long,
        help: "The snapshot store the publisher writes: a directory, or a bucket (s3://BUCKET/PREFIX, docs/s3.md).")
    var store: String

    @OptionGroup var access: BucketOptions

    @Option(
        name: .customLong("manifest-poll"),
        help: ArgumentHelp(
            "With an s3:// store: how often each manifest is read (a conditional GET), e.g. 2s (the default) or 500ms.",
            valueName: "duration"),
        transform: Duration.argument(in: .milliseconds(100) ... .longestSetting, expected: "at least 100ms"))
    var manifestPoll: Duration?

    @Flag(
        name: .customLong("presign-objects"),
        help: ArgumentHelp(
            "With an s3:// store: the object lookup also names a presigned URL of the object in the bucket (Ferry-Object-URL, valid 1 hour), so nginx fills its cache from the bucket, not from this replica (deploy/nginx/ferry.conf)."
        ))
    var presignObjects = false

    /// The flags given that only a store in a bucket takes.
    var bucketOnlyFlags: [String] {
        // serve takes --cache-dir with a store directory too: its build cache.
        access.givenFlags.filter { $0 != "--cache-dir" }
            + [("--manifest-poll", manifestPoll != nil), ("--presign-objects", presignObjects)].filter(\.1).map(\.0)
    }

    var bucket: ServeConfiguration.BucketSettings {
        var bucket = ServeConfiguration.BucketSettings()
        bucket.endpoint = access.s3Endpoint
        if let manifestPoll { bucket.manifestPoll = manifestPoll }
        bucket.cacheParent = access.cacheDir.map { URL(fileURLWithPath: $0) }
        bucket.presignObjects = presignObjects
        return bucket
    }
}

/// `ferry serve`'s limits: how long it keeps things and how much it accepts.
struct ServeLimitsOptions: ParsableArguments {
    @Option(
        name: .customLong("change-retention"),
        help: ArgumentHelp(
            "How long the server keeps its answer to each uploaded change (a device resending the change within this gets the same answer, exactly once), e.g. 30d (the default) or 12h.",
            valueName: "duration"), transform: Duration.intervalArgument)
    var changeRetention: Duration = .seconds(30 * 86_400)

    @Option(
        name: .customLong("retention-sweep-interval"),
        help: ArgumentHelp(
            "How often answers older than --change-retention are deleted, e.g. 1h (the default) or 10m.",
            valueName: "duration"), transform: Duration.intervalArgument)
    var retentionSweepInterval: Duration = .seconds(3_600)

    @Option(
        name: .customLong("device-retention"),
        help: ArgumentHelp(
            "How long the fleet (ferry_devices, with --database-url) keeps a device it has not seen, e.g. 90d (the default) or 30d.",
            valueName: "duration"), transform: Duration.intervalArgument)
    var deviceRetention: Duration = .seconds(90 * 86_400)

    @Option(
        name: .customLong("merger-connections"),
        help: ArgumentHelp(
            "PostgreSQL connections each dataset's change merger keeps open (1 to 64).", valueName: "count"))
    var mergerConnections: Int = 2

    @Option(
        name: .customLong("token-cache-ttl"),
        help: ArgumentHelp(
            "How long a token's scope (or its refusal) is cached, e.g. 5s (the default) or 500ms: a revoke or a grant takes effect within this (0 to 1h).",
            valueName: "duration"),
        transform: Duration.argument(
            in: .zero ... .seconds(3600), expected: "0 (ask PostgreSQL every time) to 3600 seconds"))
    var tokenCacheTTL: Duration = .seconds(5)

    @Option(
        name: .customLong("drain-timeout"),
        help: ArgumentHelp(
            "How long SIGTERM waits for in-flight downloads, e.g. 30s (the default).", valueName: "duration"),
        transform: Duration.argument(in: .zero ... .seconds(86_400), expected: "0 to 86400 seconds"))
    var drainTimeout: Duration = .seconds(30)

    @Option(
        name: .customLong("idle-timeout"),
        help: ArgumentHelp(
            "How long a keep-alive connection with no request in flight stays open, e.g. 60s (the default; 0: forever).",
            valueName: "duration"),
        transform: Duration.argument(in: .zero ... .seconds(86_400), expected: "0 (forever) to 86400 seconds"))
    var idleTimeout: Duration = .seconds(60)

    @Option(
        name: .customLong("header-timeout"),
        help: ArgumentHelp(
            "How long a client may take to send a request's line and headers from their first byte, e.g. 10s (the default; 0: no limit).",
            valueName: "duration"),
        transform: Duration.argument(in: .zero ... .seconds(86_400), expected: "0 (no limit) to 86400 seconds"))
    var headerTimeout: Duration = .seconds(10)

    @Option(
        name: .customLong("max-header-bytes"),
        help: ArgumentHelp("Largest request line plus headers; larger is answered 400.", valueName: "bytes"))
    var maxHeaderBytes: Int = 80 * 1024

    @Option(
        name: .customLong("max-body-bytes"),
        help: ArgumentHelp(
            "Largest change batch body; larger is answered 413 and the connection closed.", valueName: "bytes"))
    var maxBodyBytes: Int = ChangeRequest.Limits().maxBodyBytes

    @Option(
        name: .customLong("max-changes"),
        help: ArgumentHelp("Most changes in one uploaded batch; more is answered 400.", valueName: "count"))
    var maxChanges: Int = ChangeRequest.Limits().maxChanges

    @Option(
        name: .customLong("download-buffer-bytes"),
        help: ArgumentHelp(
            "Most memory all downloads together hold in file chunks (at least 2 MiB); beyond it, downloads take turns.",
            valueName: "bytes"))
    var downloadBufferBytes: Int = 64 << 20

    @Option(
        name: .customLong("max-attachment-bytes"),
        help: ArgumentHelp(
            "Largest attachment accepted (PUT, or a resumable upload's length); larger is answered 413.",
            valueName: "bytes"))
    var maxAttachmentBytes: Int64 = 64 << 20

    @Option(
        name: .customLong("cache-size"),
        help: ArgumentHelp(
            "Most bytes of the files served on request that the server keeps (versions built whole for clients that ask for one whole, catch-up patches), e.g. 4G (the default), 512M or a byte count; the least recently used go first.",
            valueName: "size"), transform: ByteSize.argument)
    var cacheSize: Int64 = BuildSettings().cacheLimit

    @Option(
        name: .customLong("attachment-grace"),
        help: ArgumentHelp(
            "How long an attachment no retained version names is kept after its upload, e.g. 7d (the default) or 12h.",
            valueName: "duration"), transform: Duration.intervalArgument)
    var attachmentGrace: Duration = .seconds(7 * 86_400)

    func validate() throws {
        guard maxAttachmentBytes >= 1 else {
            throw ValidationError("--max-attachment-bytes must be at least 1, got \(maxAttachmentBytes)")
        }
        guard maxHeaderBytes >= 1024 else { throw ValidationError("--max-header-bytes must be at least 1024") }
        guard maxBodyBytes >= 1024 else { throw ValidationError("--max-body-bytes must be at least 1024") }
        guard maxChanges >= 1 else { throw ValidationError("--max-changes must be at least 1") }
        // Two chunks of 1 MiB at the least: one download must always be able to stream.
        guard downloadBufferBytes >= 2 << 20 else {
            throw ValidationError(
                "--download-buffer-bytes must be at least 2097152 (2 MiB, two 1 MiB chunks), got \(downloadBufferBytes)"
            )
        }
        guard (1...64).contains(mergerConnections) else {
            throw ValidationError("--merger-connections must be between 1 and 64, got \(mergerConnections)")
        }
    }

    /// Sets every limit on `server` (and on its database side, when it has one).
    func apply(to server: inout ServerConfiguration) {
        server.drainTimeout = drainTimeout
        server.idleTimeout = idleTimeout > .zero ? idleTimeout : nil
        server.headerTimeout = headerTimeout > .zero ? headerTimeout : nil
        server.maxHeaderBytes = maxHeaderBytes
        server.changeLimits.maxBodyBytes = maxBodyBytes
        server.changeLimits.maxChanges = maxChanges
        server.downloadBufferBytes = downloadBufferBytes
        server.tokenCacheTTL = tokenCacheTTL
        server.maxAttachmentBytes = maxAttachmentBytes
        server.attachmentGrace = attachmentGrace
        server.builds.cacheLimit = cacheSize
        server.database?.changeRetention = changeRetention
        server.database?.retentionSweepInterval = retentionSweepInterval
        server.database?.deviceRetention = deviceRetention
        server.database?.mergerConnections = mergerConnections
    }
}

/// `--tls-cert` and `--tls-key`: HTTPS.
struct TLSOptions: ParsableArguments {
    @Option(
        name: .customLong("tls-cert"),
        help: ArgumentHelp(
            "Serve HTTPS with this certificate chain (PEM, server certificate first); needs --tls-key.",
            valueName: "pem"))
    var tlsCert: String?

    @Option(
        name: .customLong("tls-key"),
        help: ArgumentHelp("The private key of --tls-cert (PEM, unencrypted); needs --tls-cert.", valueName: "pem"))
    var tlsKey: String?

    func validate() throws {
        guard let tls = try settings() else { return }
        do {
            _ = try tls.makeTLSConfiguration()
        } catch let error as FerryError {
            let option = error.path == tls.privateKey.path ? "--tls-key" : "--tls-cert"
            throw ValidationError("\(option) \(error)")
        }
    }

    /// Both TLS files or neither.
    func settings() throws -> ServerConfiguration.TLSSettings? {
        switch (tlsCert, tlsKey) {
        case (nil, nil): return nil
        case (_?, nil): throw ValidationError("--tls-cert needs --tls-key (the certificate's private key, PEM)")
        case (nil, _?): throw ValidationError("--tls-key needs --tls-cert (the certificate chain, PEM)")
        case (let cert?, let key?):
            return .init(certificateChain: URL(fileURLWithPath: cert), privateKey: URL(fileURLWithPath: key))
        }
    }
}
